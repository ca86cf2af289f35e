import type { JobOptions } from '../model/enqueue-options.js';
import type { JobKind } from '../model/job-kind.js';
import { rejectUnknownKeys, validateInt, validatePlainObject } from '../model/validation.js';
import { parkedToken } from '../storage/testing.js';
import { CannotRunJobError, JobRunTimeoutError } from './errors.js';
import { handlerList, kindAmong, type Handlers } from './handlers.js';
import { jobRun, type JobRun } from './job-run.js';
import { TestHost, type SettledAttempt } from './test-host.js';
import { createTestSchema, type TestSchema } from './test-schema.js';

// runJob(): one job through the real path. It is enqueued in a test schema; a real WorkerHost claims it, its
// handler runs with a real context, the settle batcher writes the outcome; then the job is read back. The host
// serves only the job's queue, one job at a time, and stops claiming the moment this job's handler starts, so
// nothing else runs, even a job the handler enqueues into its own queue.

export interface RunJobOptions {
  /** The schema to run in. Default: one created for the run (on `connectionString`) and dropped after it. */
  schema?: TestSchema;
  /** Where to create that schema. Default: DATABASE_URL. */
  connectionString?: string;
  /** Enqueue options of the job (queue, priority, maxAttempts, metadata, tags, unique). */
  enqueue?: Omit<JobOptions, 'runAt' | 'delayMs'>;
  /** The queue sends jobs that fail for good to the dead-letter queue. Default false. */
  dlq?: boolean;
  /** How long the job may take to be claimed and settled. Default 30 s. A handler still running then has its
   * signal aborted (at most this long again later) and the run fails with JobRunTimeoutError. */
  timeoutMs?: number;
}

const KEYS = ['schema', 'connectionString', 'enqueue', 'dlq', 'timeoutMs'] as const;

/** Runs one job of `kind` with `args` through a real worker host and returns how its attempt ended. */
export async function runJob<Args>(
  handlers: Handlers,
  kind: JobKind<Args> | string,
  args: Args,
  options: RunJobOptions = {},
): Promise<JobRun> {
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options, KEYS);
  const list = handlerList(handlers);
  const def = kindAmong(list, kind as JobKind<unknown> | string);
  const own = options.schema ? null : await createTestSchema({ connectionString: options.connectionString });
  const t = options.schema ?? own!;
  try {
    const queue = options.enqueue?.queue ?? def.queue;
    await expectQueueIdle(t, queue, null);
    const { id, inserted } = await t.client.enqueue(def, args, options.enqueue);
    if (!inserted)
      throw new CannotRunJobError(
        `runJob: job ${id} holds this job's unique key in test schema "${t.schema}", so nothing was enqueued; run that one with runJobAgain(), or enqueue with unique: false`,
      );
    return await runAlone(t, handlers, id, queue, options);
  } finally {
    await own?.drop();
  }
}

/** Runs job `jobId`, alone in `queue`, with a host of its own; returns how its attempt ended. */
export async function runAlone(
  t: TestSchema,
  handlers: Handlers,
  jobId: string,
  queue: string,
  options: { dlq?: boolean; timeoutMs?: number },
  caller = 'runJob',
): Promise<JobRun> {
  const timeoutMs =
    options.timeoutMs === undefined ? 30_000 : validateInt('timeoutMs', options.timeoutMs, 1, 3_600_000);
  let mine: SettledAttempt | null = null;
  let started!: () => void;
  const start = new Promise<void>((resolve) => (started = resolve));
  let stopping: Promise<void> | null = null;
  const stop = () => (stopping ??= test.host.stop());
  const test: TestHost = new TestHost(t, {
    handlers: handlerList(handlers),
    queues: { [queue]: { concurrency: 1, prefetch: 0, dlq: options.dlq ?? false } },
    claimBatchSize: 1,
    shutdownTimeoutMs: timeoutMs,
    onStart: (job) => {
      if (job.id !== jobId) return;
      // Stop claiming now, before the handler can end and free its permit: this job runs to its end, and no
      // job after it is claimed (stop() takes effect a few microtasks on; the handler starts a turn later).
      void stop();
      started();
      return new Promise<void>((resolve) => setImmediate(resolve));
    },
    onSettled: (s) => {
      if (s.jobId === jobId) mine = s;
    },
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = mine === null;
    started();
  }, timeoutMs);
  try {
    await test.host.start();
    await start;
  } finally {
    await stop();
    clearTimeout(timer);
  }
  const settled = mine as SettledAttempt | null;
  if (timedOut || settled === null) throw await timeout(caller, t, jobId, timeoutMs, test);
  const job = (await t.client.getJob(jobId))!;
  const token = settled.outcome === 'wait' ? await parkedToken(t.client.pool, t.client.schema, jobId) : null;
  return jobRun(settled, job, token);
}

async function timeout(
  caller: string,
  t: TestSchema,
  jobId: string,
  ms: number,
  test: TestHost,
): Promise<JobRunTimeoutError> {
  const job = await t.client.getJob(jobId);
  const where = job ? `it is ${job.state} (attempt ${job.attempt})` : 'it no longer exists';
  return new JobRunTimeoutError(
    jobId,
    `${caller}: job ${jobId} did not settle within ${ms} ms; ${where}. A handler that never returns is aborted through ctx.signal when the run gives up: let it end on that signal, or raise timeoutMs.${test.errorLines()}`,
  );
}

/** Refuses to run when `queue` holds jobs besides `mine` that a claim could take first, or is paused. Available
 * jobs are listed rather than counted: the count includes positions a rolled-back producer took, until a claim
 * passes them, and a test that has just rolled back an enqueue must not be refused for it. */
export async function expectQueueIdle(t: TestSchema, queue: string, mine: string | null): Promise<void> {
  const counts = (await t.client.counts()).find((c) => c.queue === queue);
  if (!counts) return;
  if (counts.paused)
    throw new CannotRunJobError(
      `runJob: queue "${queue}" of test schema "${t.schema}" is paused; resume it first`,
    );
  const available = await t.client.listJobs({ state: 'available', queue, limit: 1000 });
  const others = available.filter((j) => j.id !== mine).length;
  if (others > 0 || counts.running > 0)
    throw new CannotRunJobError(
      `runJob runs one job alone, but queue "${queue}" of test schema "${t.schema}" holds ${others} other available and ${counts.running} running job(s) a claim could take first: run them with drainQueue(), or use a schema of the test's own`,
    );
}
