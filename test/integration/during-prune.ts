import pg from 'pg';
import { expect } from 'vitest';
import { pruneRing, rotateRing } from '../../src/storage/operations.js';
import { untilWaitingForLock } from '../helpers/wait.js';
import type { StorageFixture } from './storage-fixture.js';

const PRUNE = { lockTimeoutMs: 1_000, carryLimit: 100_000, carryAfterSlots: 1 };

/** Seals the current slot (what the test put there), then runs `op` on a connection of its own while a prune of
 * that slot, in a transaction of its own, holds its locks; commits the prune once `op` waits behind them and
 * returns what `op` answered. `outcome`: what the prune must do with the slot (carry its live things forward, or
 * find nothing live and truncate it). The race of prune-snapshot.test.ts and flow-control.test.ts: a decision that
 * reads the slot after the wait must see what the prune carried or kept, not the truncated slot. */
export async function duringPrune<T>(
  f: Pick<StorageFixture, 'url' | 'pool' | 'schema'>,
  outcome: 'carried' | 'pruned',
  op: (c: pg.Client) => Promise<T>,
): Promise<T> {
  const sealed = (await f.pool.query<{ s: number }>(`select ${f.schema.ident}.current_slot() as s`)).rows[0]!
    .s;
  expect(await rotateRing(f.pool, f.schema)).not.toBeNull();
  const pruner = new pg.Client({ connectionString: f.url });
  const actor = new pg.Client({ connectionString: f.url });
  await Promise.all([pruner.connect(), actor.connect()]);
  try {
    const pid = (await actor.query<{ pid: number }>(`select pg_backend_pid() as pid`)).rows[0]!.pid;
    await pruner.query('begin');
    expect(await pruneRing(pruner, f.schema, PRUNE)).toMatchObject({ slot: sealed, outcome });
    const answer = op(actor);
    answer.catch(() => {}); // awaited below; a failure meanwhile must not count as unhandled
    await untilWaitingForLock(f.pool, pid, 'the operation to wait for the prune');
    await pruner.query('commit');
    return await answer;
  } finally {
    await pruner.query('rollback').catch(() => {});
    await Promise.all([pruner.end(), actor.end()]);
  }
}
