// A job's result on its way from a worker thread: the thread encoded it already (encodeResult(), with the same
// checks as inline), so the coordinator stores the text as it came instead of encoding a string of JSON again.

export class EncodedResult {
  constructor(readonly json: string) {}
}
