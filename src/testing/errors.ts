import { AwaError, type AwaErrorCode } from '../model/errors.js';
import type { DrainResult } from './drain-result.js';

// The errors of the test helpers. Each has a stable code, as every Awa error does, listed with the others in
// src/model/errors.ts and docs/errors.md.

/** AWA_TEST_ASSERTION: expectEnqueued() or expectNotEnqueued() found what it was told not to expect.
 * AWA_TEST_TIMEOUT: runJob() or runJobAgain(): the job was not claimed, or its attempt did not settle, in time.
 * AWA_TEST_NOT_DRAINED: drainQueue() reached its bound (settlements or time) before the queues were idle.
 * AWA_TEST_CANNOT_RUN: runJob() or runJobAgain() cannot run the job alone (its queue holds others, or the job
 * has nothing to run). */
export type TestingErrorCode = Extract<AwaErrorCode, `AWA_TEST_${string}`>;

export class AwaTestingError extends AwaError {
  constructor(code: TestingErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** A failed expectEnqueued() / expectNotEnqueued(). Like node's AssertionError it carries `actual` and
 * `expected` (the closest job and what was asked), so test runners that show a diff show one; the message
 * holds a readable one of its own for those that do not. */
export class EnqueuedAssertionError extends AwaTestingError {
  readonly actual: unknown;
  readonly expected: unknown;
  readonly operator: 'expectEnqueued' | 'expectNotEnqueued';
  readonly showDiff: boolean;
  constructor(
    operator: 'expectEnqueued' | 'expectNotEnqueued',
    message: string,
    diff?: { actual: unknown; expected: unknown },
  ) {
    super('AWA_TEST_ASSERTION', message);
    this.operator = operator;
    this.actual = diff?.actual;
    this.expected = diff?.expected;
    this.showDiff = diff !== undefined;
  }
}

/** runJob() / runJobAgain() gave up waiting: `jobId` names the job, whose state the message gives. */
export class JobRunTimeoutError extends AwaTestingError {
  readonly jobId: string;
  constructor(jobId: string, message: string) {
    super('AWA_TEST_TIMEOUT', message);
    this.jobId = jobId;
  }
}

/** runJob() / runJobAgain() refused to start: the message says why and what to do. */
export class CannotRunJobError extends AwaTestingError {
  constructor(message: string) {
    super('AWA_TEST_CANNOT_RUN', message);
  }
}

/** drainQueue() stopped at its bound; `result` is what it did until then and what is left. */
export class DrainIncompleteError extends AwaTestingError {
  readonly result: DrainResult;
  constructor(message: string, result: DrainResult) {
    super('AWA_TEST_NOT_DRAINED', message);
    this.result = result;
  }
}
