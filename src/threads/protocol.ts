import type { MessagePort } from 'node:worker_threads';
import { Unpackr } from 'msgpackr';
import { messageOf } from '../model/errors.js';
import type { JobContext } from '../model/job.js';
import { CancelJob, FailJob, MAX_DELAY_MS, RetryAfter, Snooze, unreadableThrow } from '../model/outcomes.js';

// The wire between the coordinator's PoolExecutor (src/threads/pool-executor.ts) and the pool thread
// (threads/pool-worker.ts). One Piscina task carries a batch of jobs plus a MessagePort private to that
// task. Jobs go in as one msgpackr buffer (moved, not cloned). Each job's outcome comes back on its own:
// early ones on the port as soon as they are known (so a long batch does not hold finished jobs), the
// rest in the buffer the task returns. Both sides import this file; it depends on src/model only.

/** The handler context inside a pool thread: the inline context (external callbacks, durable steps and sleeps,
 * the job's transaction, its dependencies and children excepted: they are for inline kinds) plus log lines
 * forwarded to the host. */
export interface PoolJobContext extends Omit<
  JobContext,
  | 'registerCallback'
  | 'waitForCallback'
  | 'step'
  | 'sleep'
  | 'sleepUntil'
  | 'transaction'
  | 'dependencies'
  | 'spawn'
  | 'waitForChildren'
> {
  /** Formats its arguments like console.log and sends the line to the coordinator (WorkerHost 'log'). */
  log(...args: unknown[]): void;
}

export interface PoolTask {
  /** msgpackr-encoded Job[] (a copy the sender owned, transferred). */
  jobs: Uint8Array;
  /** The task's private channel: aborts in, start/outcomes/logs/progress out. */
  port: MessagePort;
}

/** How a handler ended, in a form that survives msgpack: enough to rebuild the same outcome class. */
export interface WireError {
  type: 'RetryAfter' | 'Snooze' | 'CancelJob' | 'FailJob' | 'Error';
  name: string;
  message: string;
  stack?: string;
  /**
   * RetryAfter and Snooze: the delay as the handler gave it, unchecked (a description when it was not a
   * number). The coordinator checks it (outcomeFromWire).
   */
  delayMs?: number | string;
}

/** [job index in the batch, null on success or the error, and on success the result as JSON text when the
 * handler returned one (the thread encoded and checked it: encodeResult())]. */
export type WireOutcome =
  [index: number, error: WireError | null] | [index: number, error: null, result: string];

/** Thread → coordinator, on the task port. */
export type ThreadMessage =
  | { t: 'start' }
  | { t: 'done'; b: Uint8Array }
  | { t: 'log'; i: number; line: string }
  | { t: 'progress'; i: number; v: unknown };

/** Coordinator → thread, on the task port: the job's signal aborted (cancel, rescue, deadline, stop). */
export interface AbortMessage {
  t: 'abort';
  i: number;
  name: string;
  message: string;
}

const STACK_LINES = 12;
const OUTCOME_TYPES: ReadonlySet<string> = new Set(['RetryAfter', 'Snooze', 'CancelJob', 'FailJob', 'Error']);

/**
 * Anything a handler threw → a WireError; never throws itself (a getter that throws, a revoked Proxy).
 * Outcome classes are recognised by class or, when the user's module carries its own copy of the
 * library, by name and shape. A non-Error becomes readable text. A RetryAfter or Snooze goes out with
 * the delay as thrown, so the coordinator can say what was wrong with it.
 */
export function toWireError(thrown: unknown): WireError {
  try {
    return describeThrown(thrown);
  } catch (err) {
    const unreadable = unreadableThrow(err);
    return { type: 'Error', name: unreadable.name, message: unreadable.message };
  }
}

function describeThrown(thrown: unknown): WireError {
  if (
    thrown instanceof Error ||
    (typeof thrown === 'object' && thrown !== null && 'message' in thrown && 'name' in thrown)
  ) {
    const e = thrown as Error & { delayMs?: unknown };
    const name = String(e.name);
    const message = String(e.message);
    const stack =
      typeof e.stack === 'string' ? e.stack.split('\n').slice(0, STACK_LINES).join('\n') : undefined;
    const retryAfter = thrown instanceof RetryAfter || name === 'RetryAfter';
    if (retryAfter || thrown instanceof Snooze || name === 'Snooze') {
      const d = e.delayMs;
      const delayMs = typeof d === 'number' ? d : show(d);
      return { type: retryAfter ? 'RetryAfter' : 'Snooze', name, message, stack, delayMs };
    }
    if (thrown instanceof CancelJob || name === 'CancelJob')
      return { type: 'CancelJob', name, message, stack };
    if (thrown instanceof FailJob || name === 'FailJob') return { type: 'FailJob', name, message, stack };
    return { type: 'Error', name, message, stack };
  }
  return { type: 'Error', name: 'Error', message: `non-Error thrown: ${describeValue(thrown)}` };
}

/**
 * What a pool thread sent back for a job was not a valid outcome (or asked for an impossible delay).
 * The attempt fails with this error, through the ordinary retry path.
 */
export class InvalidOutcomeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidOutcomeError';
  }
}

/** A job's outcome as the coordinator acts on it: success (with its result, when it returned one), or a failure
 * with what to record. */
export type JobOutcome = { failed: false; result?: string } | { failed: true; error: Error };

const SUCCESS: JobOutcome = { failed: false };

/**
 * The coordinator's one door for a job's outcome off the wire (null or a WireError, as far as the
 * thread kept to the protocol). Never throws: anything that is not a well-formed outcome, or a
 * RetryAfter/Snooze whose delay is not a number of milliseconds from 0 to MAX_DELAY_MS, becomes a
 * failure of the attempt with an InvalidOutcomeError saying what was wrong. Valid outcomes are
 * rebuilt as the same outcome class, so decide() treats them like an inline throw.
 */
export function outcomeFromWire(raw: unknown, result?: unknown): JobOutcome {
  if (raw === null) {
    if (result === undefined) return SUCCESS;
    if (typeof result === 'string') return { failed: false, result };
    return {
      failed: true,
      error: new InvalidOutcomeError(
        `the pool thread sent ${show(result)} as this job's result, not JSON text`,
      ),
    };
  }
  const fail = (what: string): JobOutcome => ({ failed: true, error: new InvalidOutcomeError(what) });
  if (typeof raw !== 'object' || Array.isArray(raw))
    return fail(`the pool thread sent ${show(raw)} as this job's outcome, not null or an error object`);
  const w = raw as Record<string, unknown>;
  if (typeof w.type !== 'string' || !OUTCOME_TYPES.has(w.type))
    return fail(`the pool thread sent an outcome of unknown type ${show(w.type)}`);
  if (typeof w.message !== 'string' || typeof w.name !== 'string')
    return fail(
      `the pool thread sent a ${w.type} outcome whose name or message is not a string (name ${show(w.name)}, message ${show(w.message)})`,
    );
  const { type, name, message } = w as unknown as WireError;
  const stack = typeof w.stack === 'string' ? w.stack : undefined;
  let err: Error;
  try {
    switch (type) {
      case 'RetryAfter':
      case 'Snooze': {
        const d = w.delayMs;
        if (typeof d !== 'number' || !Number.isFinite(d) || d < 0 || d > MAX_DELAY_MS) {
          // A string is the thread's description of a delay that was not a number (toWireError).
          const outcome = fail(
            `the handler threw a ${type} with delayMs ${typeof d === 'string' ? d : show(d)}, which is not a number of milliseconds from 0 to ${MAX_DELAY_MS} (a year); ` +
              `the attempt failed instead. The ${type}'s message: ${JSON.stringify(message)}`,
          );
          if (outcome.failed && stack)
            outcome.error.stack = `${outcome.error.name}: ${outcome.error.message}\n${stack}`;
          return outcome;
        }
        err = type === 'RetryAfter' ? new RetryAfter(d, message) : new Snooze(d, message);
        break;
      }
      case 'CancelJob':
        err = new CancelJob(message);
        break;
      case 'FailJob':
        err = new FailJob(message);
        break;
      default:
        err = new Error(message);
        err.name = name;
    }
  } catch (e) {
    // Not reachable with the checks above; the door stays shut to throws all the same.
    return fail(`the pool thread sent a ${type} outcome that could not be rebuilt: ${messageOf(e)}`);
  }
  if (stack) err.stack = stack;
  return { failed: true, error: err };
}

/**
 * A buffer of outcomes off the wire (a 'done' message or a task's result) → [job index, outcome] for
 * each job it names, plus what could not be read: a buffer that is not msgpack of an array, or an entry
 * that names no job of the batch (those jobs then count as having sent no outcome). Never throws.
 */
export function readOutcomes(
  bytes: unknown,
  batchSize: number,
): { outcomes: [index: number, outcome: JobOutcome][]; problems: string[] } {
  const outcomes: [number, JobOutcome][] = [];
  const problems: string[] = [];
  if (!(bytes instanceof Uint8Array)) {
    problems.push(`outcomes arrived as ${show(bytes)}, not as bytes`);
    return { outcomes, problems };
  }
  let entries: unknown;
  try {
    entries = unpackr.unpack(bytes);
  } catch (err) {
    problems.push(`outcomes could not be decoded: ${messageOf(err)}`);
    return { outcomes, problems };
  }
  if (!Array.isArray(entries)) {
    problems.push(`outcomes decoded to ${show(entries)}, not a list`);
    return { outcomes, problems };
  }
  for (const entry of entries as unknown[]) {
    const i =
      Array.isArray(entry) && (entry.length === 2 || entry.length === 3) ? (entry[0] as unknown) : undefined;
    if (typeof i !== 'number' || !Number.isInteger(i) || i < 0 || i >= batchSize) {
      problems.push(`an outcome entry names no job of the batch: ${show(entry)}`);
      continue;
    }
    outcomes.push([i, outcomeFromWire((entry as unknown[])[1], (entry as unknown[])[2])]);
  }
  return { outcomes, problems };
}

/** A thread message that keeps to the protocol, or what is wrong with it. Never throws. */
export function checkThreadMessage(m: unknown): ThreadMessage | { t: 'invalid'; problem: string } {
  const bad = (problem: string) => ({ t: 'invalid' as const, problem });
  if (typeof m !== 'object' || m === null) return bad(`a message that is ${show(m)}, not an object`);
  const msg = m as Record<string, unknown>;
  const index = (i: unknown) => typeof i === 'number' && Number.isInteger(i) && i >= 0;
  switch (msg.t) {
    case 'start':
      return { t: 'start' };
    case 'done':
      return { t: 'done', b: msg.b as Uint8Array }; // readOutcomes checks the bytes
    case 'log':
      return index(msg.i) && typeof msg.line === 'string'
        ? { t: 'log', i: msg.i as number, line: msg.line }
        : bad(`a log message without a job index and a line: ${show(m)}`);
    case 'progress':
      return index(msg.i)
        ? { t: 'progress', i: msg.i as number, v: msg.v }
        : bad(`a progress message without a job index: ${show(m)}`);
    default:
      return bad(`a message of unknown kind ${show(msg.t)}`);
  }
}

const unpackr = new Unpackr({ useRecords: false });

/** A value for an error message: strings quoted and marked, numbers as they print, the rest as JSON (short). */
function show(value: unknown): string {
  if (typeof value === 'string')
    return `${JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value)} (a string)`;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return String(value);
  if (value === undefined) return 'undefined';
  const text = safeText(value, describeValue);
  return text.length > 100 ? `${text.slice(0, 100)}…` : text;
}

function safeText(value: unknown, f: (v: unknown) => string): string {
  try {
    return f(value);
  } catch {
    return `(a ${typeof value} that cannot be printed)`;
  }
}

function describeValue(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** msgpackr reuses its output buffer: copy the bytes into a buffer of their own before transferring. */
export function ownBytes(packed: Uint8Array): Uint8Array<ArrayBuffer> {
  const own = new Uint8Array(packed.byteLength);
  own.set(packed);
  return own;
}
