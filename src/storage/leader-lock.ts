import type pg from 'pg';
import type { Schema } from './schema.js';

// Maintenance leadership is a session advisory lock held on one dedicated connection: it is released
// the moment that connection ends, however the process died, so another process can take over.

export type Standing =
  /** This session now holds the lock; `backendPid` is its backend (the instance row names it). */
  | { outcome: 'leader'; backendPid: number }
  /** A live instance holds it. */
  | { outcome: 'held' }
  /** The holder's instance was silent past the staleness window: its session was terminated. */
  | { outcome: 'unseated'; instance: string }
  /** The same, but this role may not terminate that session. */
  | { outcome: 'refused'; instance: string };

/** Takes the leader lock if it is free, else ends the holder's session if its instance fell silent (see
 * sql/functions/engine/leader.sql). */
export async function standForLeader(
  client: pg.ClientBase,
  schema: Schema,
  instanceId: string,
  stalenessSeconds: number,
): Promise<Standing> {
  const { rows } = await client.query<{
    outcome: string;
    unseated_instance: string | null;
    backend_pid: number | null;
  }>(`select outcome, unseated_instance, backend_pid from ${schema.ident}.stand_for_leader($1, $2)`, [
    instanceId,
    stalenessSeconds,
  ]);
  const r = rows[0]!;
  if (r.outcome === 'leader') return { outcome: 'leader', backendPid: r.backend_pid! };
  if (r.outcome === 'unseated' || r.outcome === 'refused')
    return { outcome: r.outcome, instance: r.unseated_instance! };
  return { outcome: 'held' };
}

export async function releaseLeadership(client: pg.ClientBase, schema: Schema): Promise<void> {
  await client.query(`select pg_advisory_unlock(${schema.ident}.lock_ns('leader'), 0)`);
}

/** Makes every lock wait on this session fail after `ms` instead of queueing behind another transaction. */
export async function boundLockWaits(client: pg.ClientBase, ms: number): Promise<void> {
  await client.query(`select set_config('lock_timeout', $1, false)`, [`${Math.round(ms)}ms`]);
}
