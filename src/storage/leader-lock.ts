import type pg from 'pg';
import type { Schema } from './schema.js';

// Maintenance leadership is a session advisory lock held on one dedicated connection: it is released
// the moment that connection ends, however the process died, so another process can take over.

export async function tryAcquireLeadership(client: pg.ClientBase, schema: Schema): Promise<boolean> {
  const { rows } = await client.query<{ ok: boolean }>(
    `select pg_try_advisory_lock(${schema.ident}.lock_ns('leader'), 0) as ok`,
  );
  return rows[0]?.ok === true;
}

export async function releaseLeadership(client: pg.ClientBase, schema: Schema): Promise<void> {
  await client.query(`select pg_advisory_unlock(${schema.ident}.lock_ns('leader'), 0)`);
}

/** Makes every lock wait on this session fail after `ms` instead of queueing behind another transaction. */
export async function boundLockWaits(client: pg.ClientBase, ms: number): Promise<void> {
  await client.query(`select set_config('lock_timeout', $1, false)`, [`${Math.round(ms)}ms`]);
}
