import { InvalidOptionError, messageOf } from './errors.js';

// What a handler can ask for besides plain success or a thrown error. Handlers throw (or return) one of
// these; the executor turns it into the matching storage outcome.

/** Longest delay a handler may ask for: a year. */
export const MAX_DELAY_MS = 365 * 86_400_000;

/** True for a delay a RetryAfter or Snooze may carry (checked again where one arrives: it is mutable). */
export function isValidDelay(delayMs: unknown): delayMs is number {
  return typeof delayMs === 'number' && Number.isFinite(delayMs) && delayMs >= 0 && delayMs <= MAX_DELAY_MS;
}

/** The error an attempt fails with when what its handler threw cannot be read at all (a getter or a proxy
 * trap that throws, a value that cannot be printed). `readError` is what reading it threw. */
export function unreadableThrow(readError: unknown): Error {
  const err = new Error(`the handler threw a value that could not be read: ${messageOf(readError)}`);
  err.name = 'UnreadableThrow';
  return err;
}

function validDelay(name: string, delayMs: number): number {
  if (!isValidDelay(delayMs)) {
    throw new InvalidOptionError(
      `${name}.delayMs`,
      `must be a number of milliseconds from 0 to ${MAX_DELAY_MS}, got ${String(delayMs)}`,
    );
  }
  return delayMs;
}

/** Retry after an explicit delay. Counts as a failed attempt, so it is bounded by maxAttempts. */
export class RetryAfter extends Error {
  readonly delayMs: number;
  constructor(delayMs: number, reason = `retry requested in ${delayMs} ms`) {
    super(reason);
    this.name = 'RetryAfter';
    this.delayMs = validDelay('RetryAfter', delayMs);
  }
}

/** Run again later without spending an attempt (polling an external state, say). */
export class Snooze extends Error {
  readonly delayMs: number;
  constructor(delayMs: number, reason = `snoozed for ${delayMs} ms`) {
    super(reason);
    this.name = 'Snooze';
    this.delayMs = validDelay('Snooze', delayMs);
  }
}

/** Stop for good: the job ends as cancelled, with no retry. */
export class CancelJob extends Error {
  constructor(reason = 'cancelled by handler') {
    super(reason);
    this.name = 'CancelJob';
  }
}

/** Fail for good without retrying, whatever attempts remain. */
export class FailJob extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'FailJob';
  }
}

/**
 * Park the job until an external callback settles it: thrown (or returned) by a handler after it registered
 * a callback with ctx.registerCallback(). Its permit is freed at once; the callback (or its timeout)
 * completes, fails, retries, cancels or resumes the job. See docs/callbacks.md.
 */
export class WaitForCallback extends Error {
  constructor(reason = 'waiting for an external callback') {
    super(reason);
    this.name = 'WaitForCallback';
  }
}

/**
 * What ctx.waitForChildren() rejects with while children it spawned have not all ended: the attempt has ended
 * already (blocked, no attempt spent, its permit given back) and the handler runs again from the top once they
 * have. Let it propagate. See docs/flows.md, "Children".
 */
export class WaitForChildren extends Error {
  constructor(open: number) {
    super(`waiting for ${open} child job(s) to end`);
    this.name = 'WaitForChildren';
  }
}

/** What ctx.waitForCallback() rejects with when the callback reports a failure: a FailJob, so the job fails
 * for good unless the handler catches it. */
export class ExternalFailure extends FailJob {
  readonly payload: unknown;
  constructor(message: string, payload?: unknown) {
    super(message);
    this.name = 'ExternalFailure';
    this.payload = payload;
  }
}

/** What ctx.waitForCallback() rejects with when no callback came in time (the attempt then fails and is
 * retried like any failure unless the handler catches it). */
export class CallbackTimeout extends Error {
  constructor(ms: number) {
    super(`no callback within ${ms} ms`);
    this.name = 'CallbackTimeout';
  }
}
