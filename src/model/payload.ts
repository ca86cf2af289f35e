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

/** Longest result a handler may return, encoded (it is stored with the completion: docs/flows.md, "Results"). */
export const MAX_RESULT_BYTES = 64 * 1024;

/**
 * A handler's return value → JSON text to store with its completion, or undefined when it returned nothing
 * (undefined or null: no result is stored, and a drain whose handlers return nothing does no work here). The
 * rules of args: what JSON cannot hold exactly, or jsonb cannot store, is refused rather than changed; so is a
 * result over MAX_RESULT_BYTES. The error thrown fails the attempt as if the handler had thrown it.
 */
export function encodeResult(kind: string, value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  const text = stringifyStrict(kind, value, 'Result');
  if (hasUnstorable(text)) {
    const where = unstorablePath(value, 'result') ?? 'result';
    throw new PayloadNotSerialisableError(
      kind,
      `${where} holds U+0000 or a lone UTF-16 surrogate, which PostgreSQL's jsonb cannot store`,
      'Result',
    );
  }
  if (text.length * 3 > MAX_RESULT_BYTES) {
    const bytes = Buffer.byteLength(text);
    if (bytes > MAX_RESULT_BYTES) throw new PayloadTooLargeError(kind, bytes, MAX_RESULT_BYTES, 'Result');
  }
  return text;
}

function stringifyStrict(kind: string, value: unknown, subject: PayloadSubject): string {
  let text: string | undefined;
  try {
    // Plain data (nearly all args) takes JSON.stringify's fast path: a replacer costs each value a call back
    // into JavaScript, about three times the whole encoding. Anything else goes through the strict replacer.
    text = isPlainJson(value, 0) ? JSON.stringify(value) : JSON.stringify(value, strictReplacer);
  } catch (err) {
    if (err instanceof Unserialisable) throw new PayloadNotSerialisableError(kind, err.reason, subject);
    throw new PayloadNotSerialisableError(kind, messageOf(err), subject);
  }
  if (text === undefined)
    throw new PayloadNotSerialisableError(kind, `a ${typeof value} is not JSON`, subject);
  return text;
}

/** Below this depth a value is walked for the fast path; deeper ones (and cycles) take the strict replacer. */
const MAX_PLAIN_DEPTH = 32;

/**
 * True when `value` is plain JSON data, which JSON.stringify writes as it is and the strict replacer would let
 * through unchanged: null, booleans, strings, finite numbers, and arrays and plain objects of those, with no
 * toJSON. False for anything else, including what the replacer accepts (a Date, a dropped undefined): false
 * only means "take the strict path", which decides.
 */
function isPlainJson(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (depth >= MAX_PLAIN_DEPTH) return false;
  if (Array.isArray(value)) {
    if ('toJSON' in value) return false;
    for (let i = 0; i < value.length; i++) if (!isPlainJson(value[i], depth + 1)) return false;
    return true;
  }
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return false;
  const record = value as Record<string, unknown>;
  // A toJSON of its own is a function, which fails the walk like any function.
  for (const key in record) if (!isPlainJson(record[key], depth + 1)) return false;
  return true;
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

/**
 * What a durable step's function resolved with (ctx.step) → JSON text to record, or null for undefined (recorded
 * as "no value", returned on a replay as undefined). The rules and bound of a result: what JSON cannot hold
 * exactly, or jsonb cannot store, is refused rather than changed, so a replay returns what the first run did.
 */
export function encodeStepResult(kind: string, value: unknown): string | null {
  if (value === undefined) return null;
  const text = stringifyStrict(kind, value, 'Step result');
  if (hasUnstorable(text)) {
    throw new PayloadNotSerialisableError(
      kind,
      `${unstorablePath(value, 'step result') ?? 'the step result'} holds U+0000 or a lone UTF-16 surrogate, which PostgreSQL's jsonb cannot store`,
      'Step result',
    );
  }
  if (text.length * 3 > MAX_RESULT_BYTES) {
    const bytes = Buffer.byteLength(text);
    if (bytes > MAX_RESULT_BYTES)
      throw new PayloadTooLargeError(kind, bytes, MAX_RESULT_BYTES, 'Step result');
  }
  return text;
}
