import type { AttemptError, JobState } from '../model/job.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// A producer's wait for a job's end (sql/functions/engine/result_waits.sql): the waiter's row, which makes the
// statements that end the job notify the result channel, and the job's outcome read after it.

/** How a job stands for a waiter: its state, its stored result once completed, its newest error once failed,
 * dead-lettered or cancelled. */
export interface JobOutcome {
  state: JobState;
  result: unknown;
  lastError: AttemptError | null;
}

/** Inserts the waiter's row (the caller already LISTENs on the result channel), then reads the job: null when
 * it never existed or its history passed retention. A job that has ended keeps no row. */
export async function resultWaitBegin(
  db: Queryable,
  schema: Schema,
  jobId: string,
  waiter: string,
): Promise<JobOutcome | null> {
  const { rows } = await db.query(`select * from ${schema.ident}.result_wait_begin($1::bigint, $2)`, [
    jobId,
    waiter,
  ]);
  return outcomeOf(rows[0]);
}

/** Reads how the job stands now, without a waiter's row (after a notification, or a reconnect). */
export async function jobOutcome(db: Queryable, schema: Schema, jobId: string): Promise<JobOutcome | null> {
  const { rows } = await db.query(`select * from ${schema.ident}.job_outcome($1::bigint)`, [jobId]);
  return outcomeOf(rows[0]);
}

/** Deletes the waiter's row: its wait is over. */
export async function resultWaitEnd(
  db: Queryable,
  schema: Schema,
  jobId: string,
  waiter: string,
): Promise<void> {
  await db.query(`select ${schema.ident}.result_wait_end($1::bigint, $2)`, [jobId, waiter]);
}

function outcomeOf(r: { state: JobState; result: unknown; last_error: AttemptError | null } | undefined) {
  if (!r) return null;
  return { state: r.state, result: r.result ?? null, lastError: r.last_error ?? null };
}
