// Reading an HTTP body (a web ReadableStream) with a size limit enforced while reading: at most maxBytes are
// ever held, however much the other side sends or claims to send. Shared by the callback receiver and HTTP
// worker targets.

/**
 * Reads the whole stream if it holds at most `maxBytes`; returns null as soon as it holds more. On overflow
 * the rest is left unread: with `cancel`, the stream is cancelled (a fetch response: its connection is let
 * go); with `release`, it is only released (a server request: its connection must stay up to carry the
 * answer).
 */
export async function readLimited(
  stream: ReadableStream<Uint8Array> | null,
  maxBytes: number,
  onOverflow: 'cancel' | 'release',
): Promise<Uint8Array | null> {
  if (!stream) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        if (onOverflow === 'cancel') await reader.cancel().catch(() => {});
        return null;
      }
      chunks.push(value);
    }
  } finally {
    reader.releaseLock();
  }
  return Buffer.concat(chunks, total);
}

/**
 * Reads and drops the rest of a stream, up to `maxBytes`; true when it ended within them. An HTTP server that
 * answers a request before it has read the body makes many clients (Node's fetch among them) fail with EPIPE
 * or a reset instead of reading the answer; reading a bounded amount more first lets them read it. Nothing
 * read is kept.
 */
export async function discardLimited(
  stream: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<boolean> {
  if (!stream) return true;
  const reader = stream.getReader();
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return true;
      total += value.byteLength;
      if (total > maxBytes) return false;
    }
  } finally {
    reader.releaseLock();
  }
}
