import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Ring maintenance, run by the leader: rotation appends to the ring ledger; prune truncates the oldest
// sealed slot once it is proven spent (see prune() in sql/001_engine.sql for the proof).

/** Returns the new current slot, or null when rotation was skipped. */
export async function rotateRing(db: Queryable, schema: Schema): Promise<number | null> {
  const { rows } = await db.query<{ slot: number | null }>(`select ${schema.ident}.rotate() as slot`);
  return rows[0]?.slot ?? null;
}

export type PruneOutcome =
  'pruned' | 'idle' | 'busy' | 'lock_busy' | 'unclaimed_ready_rows' | 'open_receipts' | 'retained_history';

export interface PruneResult {
  slot: number | null;
  outcome: PruneOutcome;
}

export async function pruneRing(
  db: Queryable,
  schema: Schema,
  opts: { completedRetentionSeconds: number; lockTimeoutMs: number },
): Promise<PruneResult> {
  const { rows } = await db.query<{ slot: number | null; outcome: PruneOutcome }>(
    `select slot, outcome from ${schema.ident}.prune($1, $2)`,
    [Math.round(opts.completedRetentionSeconds), Math.round(opts.lockTimeoutMs)],
  );
  return rows[0] ?? { slot: null, outcome: 'idle' };
}
