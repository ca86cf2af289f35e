import {
  messageOf,
  PayloadNotSerialisableError,
  PayloadTooLargeError,
  type PayloadSubject,
} from './errors.js';
import { hasUnstorable, unstorablePath } from './jsonb.js';

// Job args are stored as JSON. JSON.stringify silently drops functions and undefined and turns NaN into
// null; a queue must not store something other than what the producer passed, so those are errors. So are
// strings jsonb cannot hold (U+0000, lone surrogates): caught here, before any SQL, with the path of the value.

export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

export function encodeArgs(kind: string, args: unknown, maxBytes: number, label = 'args'): string {
  if (args === undefined) throw new PayloadNotSerialisableError(kind, 'args are undefined');
  const text = stringifyStrict(kind, args, 'Args');
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

/** Longest progress report a handler may make (ctx.progress), encoded. */
export const MAX_PROGRESS_BYTES = 64 * 1024;

/**
 * A handler's progress report → JSON text, checked when the handler makes it (so a bad value throws at the
 * ctx.progress() call, not later in a background write): the same rules as args, except that U+0000 and lone
 * surrogates are replaced when written rather than refused (the runtime writes progress on its own).
 */
export function encodeProgress(kind: string, value: unknown): string {
  const text = stringifyStrict(kind, value === undefined ? null : value, 'Progress');
  if (text.length * 3 > MAX_PROGRESS_BYTES) {
    const bytes = Buffer.byteLength(text);
    if (bytes > MAX_PROGRESS_BYTES)
      throw new PayloadTooLargeError(kind, bytes, MAX_PROGRESS_BYTES, 'Progress');
  }
  return text;
}

function stringifyStrict(kind: string, value: unknown, subject: PayloadSubject): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, strictReplacer);
  } catch (err) {
    if (err instanceof Unserialisable) throw new PayloadNotSerialisableError(kind, err.reason, subject);
    throw new PayloadNotSerialisableError(kind, messageOf(err), subject);
  }
  if (text === undefined)
    throw new PayloadNotSerialisableError(kind, `a ${typeof value} is not JSON`, subject);
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
