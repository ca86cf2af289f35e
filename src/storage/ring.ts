import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Ring maintenance, run by the leader: rotation appends to the ring ledger; prune truncates the oldest
// sealed slot once nothing in it is live, carrying stragglers forward first (see sql/functions/engine/ring.sql).

/** When a slot is ready to rotate: at least `minRows` ready rows, or older than `maxAgeMs`. Without it (or
 * with minRows 0) any slot with rows rotates. */
export interface RotateOptions {
  minRows: number;
  maxAgeMs: number;
}

/** Returns the new current slot, or null when rotation was skipped. */
export async function rotateRing(
  db: Queryable,
  schema: Schema,
  options: RotateOptions = { minRows: 0, maxAgeMs: 0 },
): Promise<number | null> {
  const { rows } = await db.query<{ slot: number | null }>(`select ${schema.ident}.rotate($1, $2) as slot`, [
    options.minRows,
    options.maxAgeMs,
  ]);
  return rows[0]?.slot ?? null;
}

/** Why the oldest sealed slot is still there, or what prune did to it. */
export type PruneOutcome =
  'pruned' | 'carried' | 'idle' | 'busy' | 'lock_busy' | 'unclaimed_ready_rows' | 'open_receipts';

export interface PruneResult {
  slot: number | null;
  outcome: PruneOutcome;
  /** Rows copied into the current slot when outcome is 'carried'. */
  carried: number;
}

export interface PruneOptions {
  lockTimeoutMs: number;
  /** Carry at most this many live rows and receipt members forward. */
  carryLimit: number;
  /** Carry only once this many slots hold rows (so a healthy ring never copies anything). */
  carryAfterSlots: number;
}

export async function pruneRing(db: Queryable, schema: Schema, opts: PruneOptions): Promise<PruneResult> {
  const { rows } = await db.query<{ slot: number | null; outcome: PruneOutcome; carried: string }>(
    `select slot, outcome, carried from ${schema.ident}.prune($1, $2, $3)`,
    [Math.round(opts.lockTimeoutMs), opts.carryLimit, opts.carryAfterSlots],
  );
  const r = rows[0];
  return r
    ? { slot: r.slot, outcome: r.outcome, carried: Number(r.carried) }
    : { slot: null, outcome: 'idle', carried: 0 };
}

/** Tallies the sealed slots whose receipts have all settled, so operator reads need not aggregate them (see
 * sql/functions/engine/tallies.sql). Returns how many it tallied; a slot whose partitions stay locked past
 * `lockTimeoutMs` is left for the next call. */
export async function tallySlots(db: Queryable, schema: Schema, lockTimeoutMs: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`select ${schema.ident}.tally_slots($1) as n`, [
    Math.round(lockTimeoutMs),
  ]);
  return rows[0]?.n ?? 0;
}

export interface RingSlot {
  slot: number;
  role: 'current' | 'sealed';
  generation: number;
  /** Statistics-collector estimates, not counts. */
  readyRows: number;
  receipts: number;
  /** For the oldest sealed slot: what keeps prune from truncating it (null when nothing does). */
  pinnedBy: PruneOutcome | null;
  /** For the oldest sealed slot: its unclaimed rows, counted up to 10,000 (`unclaimedMore`: more than that;
   * counting a backlog's 100,000 took the Storage page 70 ms). */
  unclaimed: number | null;
  unclaimedMore: boolean | null;
  openReceipts: number | null;
  /** For the oldest sealed slot: the queues whose jobs or receipts are in it. */
  queues: string[] | null;
}

/** The ring's slots that hold rows, oldest first, ending with the current one. */
export async function ringStatus(db: Queryable, schema: Schema): Promise<RingSlot[]> {
  const { rows } = await db.query(`select * from ${schema.ident}.ring_status()`);
  return rows.map((r) => ({
    slot: r.slot,
    role: r.role,
    generation: Number(r.generation),
    readyRows: Number(r.ready_rows),
    receipts: Number(r.receipts),
    pinnedBy: r.pinned_by,
    unclaimed: r.unclaimed === null ? null : Number(r.unclaimed),
    unclaimedMore: r.unclaimed_more,
    openReceipts: r.open_receipts === null ? null : Number(r.open_receipts),
    queues: r.queues,
  }));
}
