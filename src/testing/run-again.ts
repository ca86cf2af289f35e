import { rejectUnknownKeys, validateJobId, validatePlainObject } from '../model/validation.js';
import { ringStorage, type JobRecord } from '../storage/index.js';
import { makeDueNow, parkedToken } from '../storage/testing.js';
import { CannotRunJobError } from './errors.js';
import type { Handlers } from './handlers.js';
import type { JobRun } from './job-run.js';
import { expectQueueIdle, runAlone } from './run-job.js';
import type { TestSchema } from './test-schema.js';

// runJobAgain(): the next run of a job runJob() (or anything else) left waiting: a retry or a snooze is made due
// now, without waiting out its delay, and run alone like runJob()'s; a job a callback resumed runs as it is.
// Each run is a real attempt, so attempt counts and error history grow as they would in production.

export interface RunAgainOptions {
  /** The schema the job is in. */
  schema: TestSchema;
  /** As for runJob(). */
  dlq?: boolean;
  timeoutMs?: number;
}

/** Most due jobs one promotion moves: a test schema holds far fewer. */
const PROMOTE_LIMIT = 10_000;

/** Runs job `job` (an id, or what enqueue() or runJob() returned as `.job`) again; returns how it ended. */
export async function runJobAgain(
  handlers: Handlers,
  job: string | { id: string },
  options: RunAgainOptions,
): Promise<JobRun> {
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options, ['schema', 'dlq', 'timeoutMs']);
  const id = validateJobId('job', job);
  const t = options.schema;
  const record = await runnable(t, id);
  await expectQueueIdle(t, record.queue, id);
  return runAlone(t, handlers, id, record.queue, options, 'runJobAgain');
}

/** The job, made available now if it waits for a run time; refused when there is nothing to run. */
async function runnable(t: TestSchema, id: string, promoted = false): Promise<JobRecord> {
  const job = await t.client.getJob(id);
  if (!job) throw new CannotRunJobError(`runJobAgain: there is no job ${id} in test schema "${t.schema}"`);
  if ((job.state === 'scheduled' || job.state === 'retryable') && !promoted) {
    await makeDueNow(t.client.pool, t.client.schema, [id]);
    await ringStorage(t.client.schema).maintenance.promoteDue(t.client.pool, PROMOTE_LIMIT);
    return runnable(t, id, true);
  }
  if (job.state === 'available') return job;
  throw new CannotRunJobError(`runJobAgain: job ${id} has nothing to run: ${await why(t, job)}`);
}

async function why(t: TestSchema, job: JobRecord): Promise<string> {
  switch (job.state) {
    case 'waiting_external': {
      const token = await parkedToken(t.client.pool, t.client.schema, job.id);
      return `it is parked until a callback for token ${token}: deliver one with client.resumeExternal(token) to run its handler again, or completeExternal/failExternal/retryExternal/cancelExternal to settle it`;
    }
    case 'running':
      return 'an attempt of it is running now';
    case 'scheduled':
    case 'retryable':
      return `it is still ${job.state}: promotion could not move it (another session holds its row?)`;
    default:
      return `it ended as ${job.state} after ${job.attempt} attempt(s); client.retryJob(id) makes an ended job runnable again`;
  }
}
