import {
  CancelJob,
  FailJob,
  isValidDelay,
  MAX_DELAY_MS,
  RetryAfter,
  Snooze,
  unreadableThrow,
  WaitForCallback,
  WaitForChildren,
} from '../model/outcomes.js';
import type { Outcome } from '../storage/index.js';

// Turns how a handler ended into the storage outcome: the retry policy lives here.

export interface Decision {
  outcome: Outcome;
  runAt?: Date;
  error?: Record<string, unknown>;
}

const COMPLETED: Decision = { outcome: 'completed' };

/** Never throws: a thrown value that cannot be read (a getter or proxy trap that throws) fails the attempt
 * with an UnreadableThrow instead, through the same retry rule. */
export function decide(
  thrown: unknown,
  failed: boolean,
  attempt: number,
  maxAttempts: number,
  now = Date.now(),
): Decision {
  try {
    return decideFor(thrown, failed, attempt, maxAttempts, now);
  } catch (readError) {
    return decideFor(unreadableThrow(readError), true, attempt, maxAttempts, now);
  }
}

function decideFor(
  thrown: unknown,
  failed: boolean,
  attempt: number,
  maxAttempts: number,
  now: number,
): Decision {
  if (!failed) return thrown instanceof WaitForCallback ? { outcome: 'wait' } : COMPLETED;
  // The delay was checked when the outcome was made, but it is a plain field a handler can overwrite.
  if ((thrown instanceof Snooze || thrown instanceof RetryAfter) && !isValidDelay(thrown.delayMs)) {
    const bad = new Error(
      `${thrown.name} carries an invalid delayMs (${String(thrown.delayMs)}); it must be 0 to ${MAX_DELAY_MS} ms`,
    );
    bad.name = 'InvalidOutcome';
    thrown = bad;
  }
  if (thrown instanceof Snooze) return { outcome: 'snooze', runAt: new Date(now + thrown.delayMs) };
  if (thrown instanceof WaitForCallback) return { outcome: 'wait' };
  if (thrown instanceof WaitForChildren) return { outcome: 'block' };
  const error = errorRecord(thrown, attempt, now);
  if (thrown instanceof CancelJob) return { outcome: 'cancelled', error };
  if (thrown instanceof FailJob || attempt >= maxAttempts) return { outcome: 'failed', error };
  // Without a delay of its own, the retry waits out the backoff rule, which the database applies
  // (backoff() in sql/functions/core/common.sql: the one definition, shared with rescue).
  if (thrown instanceof RetryAfter) return { outcome: 'retry', runAt: new Date(now + thrown.delayMs), error };
  return { outcome: 'retry', error };
}

/** Longest error text kept per attempt, and per stack line: a handler that throws an error carrying a whole
 * response body must not write megabytes into the job's history at every attempt. */
export const MAX_ERROR_CHARS = 4_096;
const MAX_STACK_LINE_CHARS = 512;
const STACK_LINES = 8;

/** A handler may throw anything, including non-Errors; record something readable either way. */
export function errorRecord(thrown: unknown, attempt: number, now = Date.now()): Record<string, unknown> {
  const at = new Date(now).toISOString();
  if (thrown instanceof Error) {
    const message: unknown = thrown.message;
    return {
      attempt,
      at,
      error: typeof message === 'string' ? clip(message, MAX_ERROR_CHARS) : message,
      name: clip(String(thrown.name), MAX_STACK_LINE_CHARS),
      stack: thrown.stack
        ?.split('\n')
        .slice(0, STACK_LINES)
        .map((line) => clip(line, MAX_STACK_LINE_CHARS))
        .join('\n'),
    };
  }
  let text: string;
  try {
    text = typeof thrown === 'string' ? thrown : (JSON.stringify(thrown) ?? String(thrown));
  } catch {
    text = String(thrown);
  }
  return { attempt, at, error: clip(`non-Error thrown: ${text}`, MAX_ERROR_CHARS), name: typeof thrown };
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length - max} more characters)`;
}
