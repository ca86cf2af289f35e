import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

export interface CleanupResult {
  failed: number;
  dlq: number;
  attemptStates: number;
  instances: number;
}

/** History retention and housekeeping (leader only); bounded to `limit` rows per kind per call. */
export async function cleanupHistory(
  db: Queryable,
  schema: Schema,
  opts: { failedRetentionSeconds: number; dlqRetentionSeconds: number; limit: number },
): Promise<CleanupResult> {
  const { rows } = await db.query(`select * from ${schema.ident}.cleanup($1, $2, $3)`, [
    Math.round(opts.failedRetentionSeconds),
    Math.round(opts.dlqRetentionSeconds),
    opts.limit,
  ]);
  const r = rows[0];
  return {
    failed: Number(r.failed),
    dlq: Number(r.dlq),
    attemptStates: Number(r.attempt_states),
    instances: Number(r.instances),
  };
}
