import type { AttemptError, JobState } from '../model/job.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Operator reads (see sql/functions/admin.sql): counts from cursors and receipts, one job's state derived in
// one SQL function and one snapshot.

export interface QueueCounts {
  queue: string;
  /** Paused fleet-wide: no host claims its jobs until it is resumed. */
  paused: boolean;
  available: number;
  running: number;
  /** Parked until an external callback (waiting_external). */
  waiting: number;
  scheduled: number;
  retryable: number;
  completed: number;
  failed: number;
  cancelled: number;
}

export async function queueCounts(db: Queryable, schema: Schema): Promise<QueueCounts[]> {
  const { rows } = await db.query<Record<Exclude<keyof QueueCounts, 'paused'>, string> & { paused: boolean }>(
    `select * from ${schema.ident}.queue_counts()`,
  );
  return rows.map((r) => ({
    queue: r.queue,
    paused: r.paused,
    available: Number(r.available),
    running: Number(r.running),
    waiting: Number(r.waiting),
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
  /** Null only for a completed job whose body is gone and of which compact history remains. */
  kind: string | null;
  queue: string;
  priority: number;
  args: unknown;
  /** Attempts started so far. */
  attempt: number;
  maxAttempts: number | null;
  runLease: number;
  runAt: Date | null;
  /** When it reached its terminal state (failed, cancelled, DLQ, or completed once its body is pruned). */
  finishedAt: Date | null;
  meta: { metadata?: Record<string, unknown>; tags?: string[]; errors?: AttemptError[] } | null;
}

/** Where job `id` stands now, or null if it never existed or its history passed retention. */
export async function findJob(db: Queryable, schema: Schema, id: string): Promise<JobRecord | null> {
  if (!/^\d{1,19}$/.test(id)) return null;
  const { rows } = await db.query(`select * from ${schema.ident}.job_state($1::bigint)`, [id]);
  const r = rows[0];
  if (!r) return null;
  return {
    id,
    state: r.state,
    kind: r.kind,
    queue: r.queue,
    priority: r.priority,
    args: r.args,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    runLease: Number(r.run_lease),
    runAt: r.run_at,
    finishedAt: r.finished_at,
    meta: r.meta,
  };
}
