import { PayloadNotSerialisableError, PayloadTooLargeError } from './errors.js';
import { hasUnstorable, unstorablePath } from './jsonb.js';

// Job args are stored as JSON. JSON.stringify silently drops functions and undefined and turns NaN into
// null; a queue must not store something other than what the producer passed, so those are errors. So are
// strings jsonb cannot hold (U+0000, lone surrogates): caught here, before any SQL, with the path of the value.

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

export function encodeArgs(kind: string, args: unknown, maxBytes: number, label = 'args'): string {
  if (args === undefined) throw new PayloadNotSerialisableError(kind, 'args are undefined');
  let text: string | undefined;
  try {
    text = JSON.stringify(args, strictReplacer);
  } catch (err) {
    if (err instanceof Unserialisable) throw new PayloadNotSerialisableError(kind, err.reason);
    throw new PayloadNotSerialisableError(kind, err instanceof Error ? err.message : String(err));
  }
  if (text === undefined) throw new PayloadNotSerialisableError(kind, `a ${typeof args} is not JSON`);
  if (hasUnstorable(text)) {
    const where = unstorablePath(args, label) ?? label;
    throw new PayloadNotSerialisableError(
      kind,
      `${where} holds U+0000 or a lone UTF-16 surrogate, which PostgreSQL's jsonb cannot store (strip NUL characters; do not cut strings inside a surrogate pair)`,
    );
  }
  // String length is a lower bound of the UTF-8 size; only measure exactly when it could matter.
  if (text.length * 3 > maxBytes) {
    const bytes = Buffer.byteLength(text);
    if (bytes > maxBytes) throw new PayloadTooLargeError(kind, bytes, maxBytes);
  }
  return text;
}

class Unserialisable extends Error {
  constructor(readonly reason: string) {
    super(reason);
  }
}

function strictReplacer(this: unknown, key: string, value: unknown): unknown {
  switch (typeof value) {
    case 'function':
    case 'symbol':
      throw unserialisable(key, `a ${typeof value}`);
    case 'bigint':
      throw unserialisable(key, 'a BigInt (convert it to a string)');
    case 'number':
      if (!Number.isFinite(value)) throw unserialisable(key, `the number ${value}`);
      return value;
    case 'undefined':
      if (Array.isArray(this)) throw unserialisable(key, 'undefined inside an array');
      return value;
    default:
      return value;
  }
}

function unserialisable(key: string, what: string): Unserialisable {
  return new Unserialisable(`${key ? `"${key}" is ` : ''}${what}`);
}
