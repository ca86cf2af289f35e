import type { MessagePort } from 'node:worker_threads';
import type { JobContext } from '../src/model/job.js';
import { CancelJob, FailJob, RetryAfter, Snooze } from '../src/model/outcomes.js';

// The wire between the coordinator's PoolExecutor (src/runtime/pool-executor.ts) and the pool thread
// (workers/pool-worker.ts). One Piscina task carries a batch of jobs plus a MessagePort private to that
// task. Jobs go in as one msgpackr buffer (moved, not cloned). Each job's outcome comes back on its own:
// early ones on the port as soon as they are known (so a long batch does not hold finished jobs), the
// rest in the buffer the task returns. Both sides import this file; it depends on src/model only.

/** The handler context inside a pool thread: the inline context plus log lines forwarded to the host. */
export interface PoolJobContext extends JobContext {
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
  delayMs?: number;
}

/** [job index in the batch, null on success or the error]. */
export type WireOutcome = [index: number, error: WireError | null];

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

/** Anything a handler threw → a WireError. Outcome classes are recognised by class or, when the user's
 * module carries its own copy of the library, by name and shape. A non-Error becomes readable text. */
export function toWireError(thrown: unknown): WireError {
  if (
    thrown instanceof Error ||
    (typeof thrown === 'object' && thrown !== null && 'message' in thrown && 'name' in thrown)
  ) {
    const e = thrown as Error & { delayMs?: unknown };
    const name = String(e.name);
    const message = String(e.message);
    const stack =
      typeof e.stack === 'string' ? e.stack.split('\n').slice(0, STACK_LINES).join('\n') : undefined;
    const delayMs = typeof e.delayMs === 'number' && Number.isFinite(e.delayMs) ? e.delayMs : undefined;
    if ((thrown instanceof RetryAfter || name === 'RetryAfter') && delayMs !== undefined) {
      return { type: 'RetryAfter', name, message, stack, delayMs };
    }
    if ((thrown instanceof Snooze || name === 'Snooze') && delayMs !== undefined) {
      return { type: 'Snooze', name, message, stack, delayMs };
    }
    if (thrown instanceof CancelJob || name === 'CancelJob')
      return { type: 'CancelJob', name, message, stack };
    if (thrown instanceof FailJob || name === 'FailJob') return { type: 'FailJob', name, message, stack };
    return { type: 'Error', name, message, stack };
  }
  return { type: 'Error', name: 'Error', message: `non-Error thrown: ${describeValue(thrown)}` };
}

/** A WireError → an Error of the same outcome class, so decide() treats it like an inline throw. */
export function fromWireError(w: WireError): Error {
  let err: Error;
  switch (w.type) {
    case 'RetryAfter':
      err = new RetryAfter(w.delayMs ?? 0, w.message);
      break;
    case 'Snooze':
      err = new Snooze(w.delayMs ?? 0, w.message);
      break;
    case 'CancelJob':
      err = new CancelJob(w.message);
      break;
    case 'FailJob':
      err = new FailJob(w.message);
      break;
    default:
      err = new Error(w.message);
      err.name = w.name;
  }
  if (w.stack) err.stack = w.stack;
  return err;
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
