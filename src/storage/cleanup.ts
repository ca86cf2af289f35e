import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

export interface CleanupResult {
  failed: number;
  dlq: number;
  completed: number;
  attemptStates: number;
  instances: number;
}

export interface RetentionSeconds {
  failedRetentionSeconds: number;
  dlqRetentionSeconds: number;
  completedRetentionSeconds: number;
}

/** History retention and housekeeping (leader only); bounded to `limit` rows per kind per call. */
export async function cleanupHistory(
  db: Queryable,
  schema: Schema,
  opts: RetentionSeconds & { limit: number },
): Promise<CleanupResult> {
  const { rows } = await db.query(`select * from ${schema.ident}.cleanup($1, $2, $3, $4)`, [
    Math.round(opts.failedRetentionSeconds),
    Math.round(opts.dlqRetentionSeconds),
    Math.round(opts.completedRetentionSeconds),
    opts.limit,
  ]);
  const r = rows[0];
  return {
    failed: Number(r.failed),
    dlq: Number(r.dlq),
    completed: Number(r.completed),
    attemptStates: Number(r.attempt_states),
    instances: Number(r.instances),
  };
}
