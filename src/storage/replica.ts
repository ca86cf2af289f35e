import type { Queryable } from './database.js';

// Where operator reads are served when a client has a read connection: how far that server is behind the
// primary. Server-wide, not per schema. Positions are WAL LSNs passed as text ('16/B374D848').

/** What the read connection reaches, and how far behind the primary it is. */
export interface ReadLag {
  /** 'primary': reads go to the primary (no read connection). 'replica': a hot standby replaying the primary's
   * WAL. 'other': a read connection to a server that is not in recovery (a logical replica, or the primary by
   * another route), whose lag this cannot measure. */
  reads: 'primary' | 'replica' | 'other';
  /** WAL the standby has not replayed yet; 0 when caught up, null when unknown. */
  bytesBehind: number | null;
  /** How old the newest data the reads can see may be: 0 when caught up, else the time since the last commit the
   * standby replayed; null when unknown. */
  lagMs: number | null;
  /** When the newest transaction the standby replayed committed on the primary; null when unknown. */
  replayedAt: Date | null;
}

/** The primary's WAL position: everything written so far, commits included, is at or before it. */
export async function primaryWalPosition(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ lsn: string }>('select pg_current_wal_insert_lsn()::text as lsn');
  return rows[0]!.lsn;
}

/** How far the read server is behind `primaryLsn`, read on the read server. */
export async function readServerLag(db: Queryable, primaryLsn: string): Promise<ReadLag> {
  const { rows } = await db.query<{
    standby: boolean;
    behind: string | null;
    replayed_at: Date | null;
    since_ms: string | null;
  }>(
    `select pg_is_in_recovery() as standby,
            greatest(pg_wal_lsn_diff($1::pg_lsn, pg_last_wal_replay_lsn()), 0)::text as behind,
            pg_last_xact_replay_timestamp() as replayed_at,
            (extract(epoch from clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::bigint::text
              as since_ms`,
    [primaryLsn],
  );
  const r = rows[0]!;
  if (!r.standby) return { reads: 'other', bytesBehind: null, lagMs: null, replayedAt: null };
  const bytesBehind = r.behind === null ? null : Number(r.behind);
  // Caught up: whatever the primary committed is visible, however long ago its last commit was.
  const lagMs = bytesBehind === 0 ? 0 : r.since_ms === null ? null : Math.max(0, Number(r.since_ms));
  return { reads: 'replica', bytesBehind, lagMs, replayedAt: r.replayed_at };
}

/** Whether the read server has replayed the primary's WAL up to `primaryLsn` (a server not in recovery: yes). */
export async function replayedUpTo(db: Queryable, primaryLsn: string): Promise<boolean> {
  const { rows } = await db.query<{ done: boolean }>(
    `select not pg_is_in_recovery()
            or pg_wal_lsn_diff(pg_last_wal_replay_lsn(), $1::pg_lsn) >= 0 as done`,
    [primaryLsn],
  );
  return rows[0]!.done;
}
