import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

export interface CleanupResult {
  failed: number;
  dlq: number;
  completed: number;
  attemptStates: number;
  instances: number;
  /** Stored results past their queue's result retention. */
  results: number;
}

export interface RetentionSeconds {
  failedRetentionSeconds: number;
  dlqRetentionSeconds: number;
  completedRetentionSeconds: number;
  /** How long stored results are kept (default: completedRetentionSeconds), and per queue where it differs. */
  resultRetentionSeconds?: number;
  resultRetentionByQueue?: ReadonlyMap<string, number>;
}

/** History retention and housekeeping (leader only); bounded to `limit` rows per kind per call. */
export async function cleanupHistory(
  db: Queryable,
  schema: Schema,
  opts: RetentionSeconds & { limit: number },
): Promise<CleanupResult> {
  const byQueue = [...(opts.resultRetentionByQueue ?? new Map<string, number>())];
  const { rows } = await db.query(
    `select * from ${schema.ident}.cleanup($1, $2, $3, $4, $5, $6::text[], $7::int[])`,
    [
      Math.round(opts.failedRetentionSeconds),
      Math.round(opts.dlqRetentionSeconds),
      Math.round(opts.completedRetentionSeconds),
      opts.limit,
      opts.resultRetentionSeconds === undefined ? null : Math.round(opts.resultRetentionSeconds),
      byQueue.map(([queue]) => queue),
      byQueue.map(([, seconds]) => Math.round(seconds)),
    ],
  );
  const r = rows[0];
  return {
    failed: Number(r.failed),
    dlq: Number(r.dlq),
    completed: Number(r.completed),
    attemptStates: Number(r.attempt_states),
    instances: Number(r.instances),
    results: Number(r.results),
  };
}
