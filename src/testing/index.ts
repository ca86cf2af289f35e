// Awa for Node.js — test helpers (the `awa-node/testing` entry point): a schema of the test's own on any
// PostgreSQL, assertions about what was enqueued (inside an open transaction too), one job through the real
// worker path, and a drain of whole queues with a clock the test moves. No test runner is imported: they work
// under vitest, node:test or any other. See docs/testing.md.
export {
  createTestSchema,
  useTestSchema,
  TestSchema,
  type TestSchemaOptions,
  type TestHooks,
} from './test-schema.js';
export { TestClock } from './clock.js';
export { expectEnqueued, expectNotEnqueued } from './expect-enqueued.js';
export type { EnqueuedMatch, PartialArgs, Matcher } from './enqueued-match.js';
export type { EnqueuedTarget } from './target.js';
export { runJob, type RunJobOptions } from './run-job.js';
export { runJobAgain, type RunAgainOptions } from './run-again.js';
export type { JobRun, JobRunOutcome } from './job-run.js';
export { drainQueue, type DrainOptions } from './drain.js';
export type { DrainResult, DrainLeft, DrainedAttempt, DrainOutcome } from './drain-result.js';
export type { Handlers } from './handlers.js';
export {
  AwaTestingError,
  EnqueuedAssertionError,
  JobRunTimeoutError,
  CannotRunJobError,
  DrainIncompleteError,
  type TestingErrorCode,
} from './errors.js';
