import type { AttemptError, JobState } from '../model/job.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Operator reads. Off the hot path: they may scan claim batches and use the BRIN id index.

export interface QueueCounts {
  queue: string;
  available: number;
  running: number;
  scheduled: number;
  retryable: number;
  completed: number;
  failed: number;
  cancelled: number;
}

export async function queueCounts(db: Queryable, schema: Schema): Promise<QueueCounts[]> {
  const { rows } = await db.query<Record<keyof QueueCounts, string>>(
    `select * from ${schema.ident}.queue_counts()`,
  );
  return rows.map((r) => ({
    queue: r.queue,
    available: Number(r.available),
    running: Number(r.running),
    scheduled: Number(r.scheduled),
    retryable: Number(r.retryable),
    completed: Number(r.completed),
    failed: Number(r.failed),
    cancelled: Number(r.cancelled),
  }));
}

export interface JobRecord {
  id: string;
  state: JobState;
  kind: string;
  queue: string;
  priority: number;
  args: unknown;
  /** Attempts started so far. */
  attempt: number;
  maxAttempts: number;
  runLease: number;
  runAt: Date | null;
  meta: { metadata?: Record<string, unknown>; tags?: string[]; errors?: AttemptError[] } | null;
}

interface BodyRow {
  kind: string;
  queue: string;
  priority: number;
  args: unknown;
  attempt: number;
  max_attempts: number;
  run_lease: string;
  meta: JobRecord['meta'];
}

/** Where job `id` stands now, or null if it never existed or its history was pruned. */
export async function findJob(db: Queryable, schema: Schema, id: string): Promise<JobRecord | null> {
  const s = schema.ident;
  const done = await db.query<BodyRow & { state: 'failed' | 'cancelled' }>(
    `select * from ${s}.done_entries where job_id = $1 order by run_lease desc limit 1`,
    [id],
  );
  if (done.rows[0]) return record(id, done.rows[0].state, done.rows[0], null);
  const dlq = await db.query<BodyRow>(`select * from ${s}.dlq_entries where job_id = $1`, [id]);
  if (dlq.rows[0]) return record(id, 'dlq', dlq.rows[0], null);
  const deferred = await db.query<BodyRow & { state: 'scheduled' | 'retryable'; run_at: Date }>(
    `select * from ${s}.deferred_jobs where job_id = $1`,
    [id],
  );
  if (deferred.rows[0]) return record(id, deferred.rows[0].state, deferred.rows[0], deferred.rows[0].run_at);
  const ready = await db.query<BodyRow & { lane_id: number; lane_seq: string; slot: number; dead: boolean }>(
    `select r.*, exists (select 1 from ${s}.ready_tombstones t where t.slot = r.slot and t.lane_id = r.lane_id
                          and t.lane_seq = r.lane_seq) as dead
       from ${s}.ready_entries r where r.job_id = $1 order by r.run_lease desc limit 1`,
    [id],
  );
  const body = ready.rows[0];
  if (!body) return null;
  if (body.dead) return record(id, 'cancelled', body, null);
  const claim = await db.query<{ outcome: string | null }>(
    `select (select c.outcome from ${s}.closure_batches c
              where c.slot = b.slot and c.batch_id = b.batch_id and c.idxs @> m.idx limit 1) as outcome
       from ${s}.claim_batches b
       cross join lateral ${s}.receipt_members(b.slot, b.batch_id) m
      where b.lane_id = $1 and b.first_seq <= $2 and b.last_seq >= $2
        and m.lane_seq = $2 and m.run_lease = $3`,
    [body.lane_id, body.lane_seq, Number(body.run_lease) + 1],
  );
  const c = claim.rows[0];
  if (!c) return record(id, 'available', body, null);
  const claimed = { ...body, attempt: body.attempt + 1, run_lease: String(Number(body.run_lease) + 1) };
  if (c.outcome === null) return record(id, 'running', claimed, null);
  if (c.outcome === 'completed') return record(id, 'completed', claimed, null);
  // Settled otherwise, yet in none of deferred, done or DLQ (a re-run would have a newer ready row):
  // its terminal history has passed retention.
  return null;
}

function record(id: string, state: JobState, row: BodyRow, runAt: Date | null): JobRecord {
  return {
    id,
    state,
    kind: row.kind,
    queue: row.queue,
    priority: row.priority,
    args: row.args,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    runLease: Number(row.run_lease),
    runAt,
    meta: row.meta,
  };
}
