import {
  CancelJob,
  FailJob,
  isValidDelay,
  MAX_DELAY_MS,
  RetryAfter,
  Snooze,
  WaitForCallback,
} from '../model/outcomes.js';
import type { Outcome } from '../storage/index.js';

// Turns how a handler ended into the storage outcome: the retry policy lives here.

export interface Decision {
  outcome: Outcome;
  runAt?: Date;
  error?: Record<string, unknown>;
}

const COMPLETED: Decision = { outcome: 'completed' };

export function decide(
  thrown: unknown,
  failed: boolean,
  attempt: number,
  maxAttempts: number,
  now = Date.now(),
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
  const error = errorRecord(thrown, attempt, now);
  if (thrown instanceof CancelJob) return { outcome: 'cancelled', error };
  if (thrown instanceof FailJob || attempt >= maxAttempts) return { outcome: 'failed', error };
  // Without a delay of its own, the retry waits out the backoff rule, which the database applies
  // (backoff() in sql/functions/common.sql: the one definition, shared with rescue).
  if (thrown instanceof RetryAfter) return { outcome: 'retry', runAt: new Date(now + thrown.delayMs), error };
  return { outcome: 'retry', error };
}

/** A handler may throw anything, including non-Errors; record something readable either way. */
export function errorRecord(thrown: unknown, attempt: number, now = Date.now()): Record<string, unknown> {
  const at = new Date(now).toISOString();
  if (thrown instanceof Error) {
    return {
      attempt,
      at,
      error: thrown.message,
      name: thrown.name,
      stack: thrown.stack?.split('\n').slice(0, 8).join('\n'),
    };
  }
  let text: string;
  try {
    text = typeof thrown === 'string' ? thrown : (JSON.stringify(thrown) ?? String(thrown));
  } catch {
    text = String(thrown);
  }
  return { attempt, at, error: `non-Error thrown: ${text}`, name: typeof thrown };
}
