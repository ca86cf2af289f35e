import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Promotion: due scheduled and retryable jobs move from deferred_jobs into the ready ring.

/** Moves at most `limit` due jobs; returns how many moved. */
export async function promoteDue(db: Queryable, schema: Schema, limit: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`select ${schema.ident}.promote_due($1) as n`, [limit]);
  return rows[0]?.n ?? 0;
}
