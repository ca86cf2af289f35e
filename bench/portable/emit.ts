// The JSONL output: stdout carries only protocol lines (one JSON object each, every one stamped with this
// replica's instance_id); logs go to stderr.

export const SYSTEM = 'awa-node';

let instanceId = 0;
let stdoutOpen = true;

/** BENCH_INSTANCE_ID of this replica, stamped on every line from now on. */
export function setInstanceId(id: number): void {
  instanceId = id;
}

/**
 * The harness closing its end of stdout (EPIPE) means it is done with this replica: nothing more is
 * written, and `onClosed` runs once (the adapter shuts down and exits 0). Without a listener, Node would
 * die on the 'error' event with a stack trace. A closed stderr is ignored the same way.
 */
export function onStdoutClosed(onClosed: () => void): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    if (!stdoutOpen) return;
    stdoutOpen = false;
    onClosed();
  });
  process.stderr.on('error', () => {});
}

export function writeLine(obj: Record<string, unknown>): void {
  if (!stdoutOpen) return;
  process.stdout.write(JSON.stringify({ ...obj, instance_id: instanceId }) + '\n');
}

export function metric(t: Date, name: string, value: number | null, windowS: number): void {
  if (value === null || !Number.isFinite(value)) return; // no sample in the window: say nothing
  writeLine({
    t: t.toISOString(),
    system: SYSTEM,
    kind: 'adapter',
    subject_kind: 'adapter',
    subject: '',
    metric: name,
    value: Math.round(value * 1000) / 1000,
    window_s: windowS,
  });
}

export function log(line: string): void {
  process.stderr.write(`[awa-node adapter ${process.pid} #${instanceId}] ${line}\n`);
}
