import type pg from 'pg';
import { findJob, type JobRecord } from './admin.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// What the test helpers of src/testing ask of storage and the engine's functions deliberately do not offer:
// which jobs were enqueued (read on the caller's connection, so an open transaction sees its own jobs), a test
// clock that moves due times instead of waiting for them, and dropping a test schema. None of it belongs in the
// contract: no role needs it, and it writes deferred rows the engine otherwise only inserts and deletes. The
// conformance suite's hooks (test/conformance/variants.ts) move time the same way.

/** Most jobs of one kind an assertion reads: enough for any test, bounded for a schema that is not one. */
export const ENQUEUED_READ_LIMIT = 1_000;

/** Every job of `kind` the connection can see, oldest first: in the ring (whatever became of it since) or off
 * it (scheduled, retryable, parked, failed, cancelled, DLQ). A completion that ring prune moved to compact
 * history keeps no kind and is not found. */
export async function enqueuedJobs(db: Queryable, schema: Schema, kind: string): Promise<JobRecord[]> {
  const { rows } = await db.query<{ id: string }>(
    `select x.job_id::text as id
       from (select r.job_id from ${schema.ident}.ready_entries r where r.kind = $1
             union
             select o.job_id from ${schema.ident}.off_ring_jobs o where o.kind = $1) x
      order by x.job_id limit $2`,
    [kind, ENQUEUED_READ_LIMIT],
  );
  const jobs: JobRecord[] = [];
  // One read per job through job_state(), the read getJob() makes, so a record here is what getJob() shows.
  for (const { id } of rows) {
    const job = await findJob(db, schema, id);
    if (job) jobs.push(job);
  }
  return jobs;
}

/** How many jobs of each kind the connection can see, for a failed assertion to say what was enqueued. */
export async function enqueuedKinds(
  db: Queryable,
  schema: Schema,
): Promise<{ kind: string; jobs: number }[]> {
  const { rows } = await db.query<{ kind: string; jobs: number }>(
    `select x.kind, count(distinct x.job_id)::int as jobs
       from (select r.kind, r.job_id from ${schema.ident}.ready_entries r
             union all
             select o.kind, o.job_id from ${schema.ident}.off_ring_jobs o) x
      group by x.kind order by x.kind`,
  );
  return rows;
}

/** The test clock's step: every deferred job (scheduled, snoozed, retry backoff) and every parked job's
 * callback timeout falls due `ms` earlier, as if that much time had passed. Returns how many rows moved. */
export async function shiftDueTimes(
  db: Queryable,
  schema: Schema,
  ms: number,
): Promise<{ deferred: number; timeouts: number }> {
  const { rows } = await db.query<{ deferred: number; timeouts: number }>(
    `with d as (update ${schema.ident}.deferred_jobs set run_at = run_at - make_interval(secs => $1::float8 / 1000)
                returning 1),
          w as (update ${schema.ident}.waiting_jobs set timeout_at = timeout_at - make_interval(secs => $1::float8 / 1000)
                 where timeout_at is not null returning 1)
     select (select count(*) from d)::int as deferred, (select count(*) from w)::int as timeouts`,
    [ms],
  );
  return rows[0]!;
}

/** Makes deferred jobs due now (a retry or snooze a test wants to run at once). Returns how many it found. */
export async function makeDueNow(db: Queryable, schema: Schema, ids: readonly string[]): Promise<number> {
  const { rowCount } = await db.query(
    `update ${schema.ident}.deferred_jobs set run_at = least(run_at, now()) where job_id = any($1::bigint[])`,
    [ids],
  );
  return rowCount ?? 0;
}

/** Milliseconds until the next deferred job or callback timeout of `queues` (all when null) falls due: 0 when
 * one is due now, null when nothing waits for a time. Measured on the server's clock, as promotion is. */
export async function nextDueInMs(
  db: Queryable,
  schema: Schema,
  queues: readonly string[] | null,
): Promise<number | null> {
  const { rows } = await db.query<{ ms: string | null }>(
    // greatest() skips nulls: without the case, nothing waiting would read as due now.
    `select case when min(x.t) is not null
                 then greatest(0, ceil(extract(epoch from (min(x.t) - clock_timestamp())) * 1000))::bigint::text end as ms
       from (select min(d.run_at) as t from ${schema.ident}.deferred_jobs d
              where $1::text[] is null or d.queue = any($1)
             union all
             select min(w.timeout_at) from ${schema.ident}.waiting_jobs w
              where w.timeout_at is not null and ($1::text[] is null or w.queue = any($1))) x`,
    [queues],
  );
  const ms = rows[0]?.ms;
  return ms === null || ms === undefined ? null : Number(ms);
}

/** The callback token a parked job waits for, or null when it is not parked. */
export async function parkedToken(db: Queryable, schema: Schema, jobId: string): Promise<string | null> {
  const { rows } = await db.query<{ token: string }>(
    `select w.token::text as token from ${schema.ident}.waiting_jobs w where w.job_id = $1::bigint`,
    [jobId],
  );
  return rows[0]?.token ?? null;
}

/** Drops the schema and everything in it, on a connection of its own (`db` runs a transaction): waits at most
 * `lockTimeoutMs` for a session that holds one of its tables. For test schemas only: nothing else calls it. */
export async function dropSchema(db: pg.ClientBase, schema: Schema, lockTimeoutMs: number): Promise<void> {
  await db.query('begin');
  try {
    await db.query(`select set_config('lock_timeout', $1, true)`, [`${Math.round(lockTimeoutMs)}ms`]);
    await db.query(`drop schema if exists ${schema.ident} cascade`);
    await db.query('commit');
  } catch (err) {
    await db.query('rollback').catch(() => {});
    throw err;
  }
}
