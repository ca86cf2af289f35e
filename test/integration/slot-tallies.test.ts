import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  claimJobs,
  settleAttempts,
  pruneRing,
  queueCounts,
  rotateRing,
  tallySlots,
} from '../../src/storage/operations.js';
import { settleAll } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Slot tallies (sql/functions/engine/tallies.sql): the leader sums a sealed slot once its receipts have all settled,
// and the operator reads take the sum instead of the slot. Each case here checks a way a tally could go stale:
// a receipt still open, the rows it counted truncated by prune, and a claim that read the current slot just
// before the ring turned and wrote its receipt into the slot after it was tallied.

describe('slot tallies', () => {
  let f: StorageFixture;
  const claim = (queue: string, max: number) =>
    claimJobs(f.pool, f.schema, {
      queue,
      max,
      instanceId: 'tally-test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    }).then((r) => r.batches);
  const countsOf = async (queue: string) =>
    (await queueCounts(f.pool, f.schema)).find((q) => q.queue === queue)!;
  const talliedSlots = async () =>
    (
      await f.pool.query<{ slot: number }>(`select slot from ${f.schema.ident}.tallied_slots order by slot`)
    ).rows.map((r) => r.slot);
  const enqueue = (queue: string, n: number) =>
    f.client.enqueueMany(
      Array.from({ length: n }, (_, i) => ({ kind: 'k', args: { i }, options: { queue } })),
    );
  /** Turns the ring, leaving the slot that was current sealed; returns [sealed, current]. */
  const rotate = async () => {
    const next = await rotateRing(f.pool, f.schema);
    expect(next).not.toBeNull();
    return [(next! + 15) % 16, next!] as const;
  };

  beforeAll(async () => {
    f = await storageFixture('slot_tallies');
  });
  afterAll(async () => {
    await f.close();
  });

  it('waits for every receipt of a sealed slot to settle, then counts the same from the tally', async () => {
    await enqueue('a', 10);
    const done = await claim('a', 6);
    await settleAttempts(f.pool, f.schema, settleAll(done, 'completed'));
    const open = await claim('a', 2);
    const [sealed] = await rotate();
    expect(await tallySlots(f.pool, f.schema, 100)).toBe(0);
    expect(await countsOf('a')).toMatchObject({ available: 2, running: 2, completed: 6 });
    await settleAttempts(f.pool, f.schema, settleAll(open, 'completed'));
    expect(await tallySlots(f.pool, f.schema, 100)).toBe(1);
    expect(await talliedSlots()).toEqual([sealed]);
    expect(await countsOf('a')).toMatchObject({ available: 2, running: 0, completed: 8 });
    // Once tallied, a slot is not tallied again.
    expect(await tallySlots(f.pool, f.schema, 100)).toBe(0);
  });

  it('forgets a tally when prune truncates its slot or the rows its receipts read', async () => {
    // The two jobs left in queue a are in the tallied slot; claimed now, their receipt lives in the current
    // slot and reads the sealed one.
    const later = await claim('a', 2);
    await settleAttempts(f.pool, f.schema, settleAll(later, 'completed'));
    const [reader] = await rotate();
    expect(await tallySlots(f.pool, f.schema, 100)).toBe(1);
    expect(await countsOf('a')).toMatchObject({ available: 0, running: 0, completed: 10 });
    // Prune the oldest slot: its completions go to compact history, and so do those of the newer slot's receipt
    // that read its rows; both tallies that named it go.
    expect(
      (await pruneRing(f.pool, f.schema, { lockTimeoutMs: 100, carryLimit: 0, carryAfterSlots: 16 })).outcome,
    ).toBe('pruned');
    const left = await f.pool.query<{ slot: number; ready_slot: number }>(
      `select slot, ready_slot from ${f.schema.ident}.slot_tallies`,
    );
    expect(left.rows).toEqual([]);
    expect(await talliedSlots()).toEqual([reader]);
    expect(await countsOf('a')).toMatchObject({ available: 0, running: 0, completed: 10 });
    expect(await f.client.listJobs({ state: 'completed', queue: 'a', limit: 100 })).toHaveLength(10);
  });

  it('a receipt written into a slot sealed and tallied meanwhile drops the tally', async () => {
    await enqueue('b', 4);
    const first = await claim('b', 2);
    await settleAttempts(f.pool, f.schema, settleAll(first, 'completed'));
    const slot = (await f.pool.query<{ s: number }>(`select ${f.schema.ident}.current_slot() as s`)).rows[0]!
      .s;
    // A session holding SHARE on the receipt table makes the next claim wait at its receipt insert, after it read
    // the current slot: the ring turns and the slot is tallied while it waits. (The lock is on the partitioned
    // table, not the slot's partition, so the tally's own SHARE lock on the partition does not queue behind it.)
    const blocker = new pg.Client({ connectionString: f.url });
    await blocker.connect();
    try {
      await blocker.query('begin');
      await blocker.query(`lock table only ${f.schema.ident}.claim_batches in share mode`);
      const late = claim('b', 2);
      await waitForLockWait(f.pool);
      await rotate();
      expect(await tallySlots(f.pool, f.schema, 100)).toBe(1);
      expect(await talliedSlots()).toContain(slot);
      await blocker.query('commit');
      const batches = await late;
      expect(batches.flatMap((b) => b.jobs)).toHaveLength(2);
      expect(batches.map((b) => b.claimSlot)).toEqual([slot]);
      expect(await talliedSlots()).not.toContain(slot);
      expect(await countsOf('b')).toMatchObject({ available: 0, running: 2, completed: 2 });
      // Open, so the slot waits; settled, it is tallied with the late receipt in it.
      expect(await tallySlots(f.pool, f.schema, 100)).toBe(0);
      await settleAttempts(f.pool, f.schema, settleAll(batches, 'completed'));
      expect(await tallySlots(f.pool, f.schema, 100)).toBe(1);
      expect(await countsOf('b')).toMatchObject({ available: 0, running: 0, completed: 4 });
    } finally {
      await blocker.end();
    }
  });
});

/** Waits until a session of the pool's database waits for a relation lock. */
async function waitForLockWait(pool: pg.Pool): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await pool.query(
      `select 1 from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and wait_event = 'relation'`,
    );
    if (rows.length > 0) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error('no session came to wait for the lock');
}
