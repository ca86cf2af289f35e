import { request } from 'node:http';
import { signatureHeader } from '../../src/index.js';

// Talking to the callback receiver over real HTTP as an outside service would: signed (or deliberately not)
// JSON posts, and a raw request that streams a body for the size-limit tests.

export interface Answer {
  status: number;
  text: string;
  json: unknown;
  headers: Headers;
}

export interface PostOptions {
  /** Sign with this secret (or these, one v1= each); omit `secret` and `header` to send no signature. */
  secret?: string | string[];
  /** Unix seconds to sign at; default now. */
  timestamp?: number;
  /** Send this Awa-Signature header as is (instead of signing). */
  header?: string;
}

/** POSTs `body` (an object is sent as JSON, a string as is) to `url`. */
export async function post(url: string, body: unknown, options: PostOptions = {}): Promise<Answer> {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const headers: Record<string, string> = { 'Content-Type': 'application/json' };
  if (options.header !== undefined) headers['Awa-Signature'] = options.header;
  else if (options.secret !== undefined)
    headers['Awa-Signature'] = signatureHeader(options.secret, text, options.timestamp);
  const res = await fetch(url, { method: 'POST', headers, body: text });
  const answer = await res.text();
  let json: unknown = undefined;
  try {
    json = JSON.parse(answer);
  } catch {
    json = undefined;
  }
  return { status: res.status, text: answer, json, headers: res.headers };
}

/**
 * Streams up to `totalBytes` to `url` in chunks (chunked encoding, or with a declared Content-Length), a
 * chunk at a time with backpressure, and stops as soon as the answer arrives. Returns the answer's status
 * and how many bytes had been written by then; or, when the server closed the connection under the upload
 * before its answer was read, status 0, the error's code (EPIPE, ECONNRESET) and what had been written.
 */
export function streamPost(
  url: string,
  headers: Record<string, string>,
  totalBytes: number,
  chunkBytes = 64 * 1024,
): Promise<{ status: number; written: number; closed?: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    let written = 0;
    let answered = false;
    const req = request(
      { host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers },
      (res) => {
        answered = true;
        res.resume();
        resolve({ status: res.statusCode ?? 0, written });
        req.destroy();
      },
    );
    // Once answered, the server may close the connection under the rest of the upload; before, that is a
    // close the caller may expect (an answer sent at once to a body it will not read), anything else fails.
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (answered) return;
      if (err.code === 'EPIPE' || err.code === 'ECONNRESET')
        resolve({ status: 0, written, closed: err.code });
      else reject(err);
    });
    const chunk = Buffer.alloc(chunkBytes, 0x61);
    const pump = () => {
      while (!answered && written < totalBytes) {
        written += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', () => setTimeout(pump, 2));
      }
      if (!answered && written >= totalBytes) req.end();
    };
    pump();
  });
}
