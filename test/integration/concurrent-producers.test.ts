import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finishAttempts, type ClaimBatch } from '../../src/storage/index.js';
import { until } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';
import { claimBatches, settleAll } from '../helpers/claim.js';

// Producers of one lane in their own transactions do not wait for each other; claim skips positions whose
// producer is still in flight, comes back for them once they commit, and passes the positions of producers
// that rolled back. Each statement below would hang (or the claim would come back wrong) on the engine that
// held the lane's enqueue lock until commit.

const ids = (batches: ClaimBatch[]) => batches.flatMap((b) => b.jobs.map((j) => j.id));

describe('concurrent producers', () => {
  let f: StorageFixture;
  const claim = (queue: string, max = 100) =>
    claimBatches(f.pool, f.schema, {
      queue,
      max,
      instanceId: 'test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
  const lane = async (queue: string) => {
    const { rows } = await f.pool.query(
      `select pg_sequence_last_value(enqueue_seq)::int as enq, pg_sequence_last_value(claim_seq)::int as high,
              pg_sequence_last_value(floor_seq)::int as floor
         from awa.lanes where queue = $1 and priority = 2`,
      [queue],
    );
    return rows[0] as { enq: number; high: number; floor: number };
  };
  const producer = async () => {
    const c = new pg.Client({ connectionString: f.url });
    await c.connect();
    return c;
  };

  beforeAll(async () => {
    f = await storageFixture('producers');
  });
  afterAll(async () => {
    await f.close();
  });

  it('a producer holding its transaction open delays neither other producers nor the claim of their jobs', async () => {
    const held = await producer();
    try {
      await held.query('begin');
      const [heldId] = (
        await f.client.enqueueMany([{ kind: 'k', args: { n: 'held' }, options: { queue: 'hold' } }], {
          client: held,
        })
      ).map((r) => r.id);
      // Other producers, each in a transaction of its own, commit while `held` is open: none waits.
      const others: string[] = [];
      for (let i = 0; i < 5; i++) {
        const c = await producer();
        await c.query('begin');
        others.push((await f.client.enqueue('k', { n: i }, { client: c, queue: 'hold' })).id);
        await c.query('commit');
        await c.end();
      }
      const first = await claim('hold');
      expect(ids(first)).toEqual(others);
      // The held position is a gap above the floor, below the high-water.
      let l = await lane('hold');
      expect(l.enq).toBe(6);
      await claim('hold'); // heals the cursors from the committed receipt
      l = await lane('hold');
      expect(l.high).toBe(6);
      expect(l.floor).toBe(0);
      expect(await claim('hold')).toEqual([]);

      await held.query('commit');
      const late = await claim('hold');
      expect(ids(late)).toEqual([heldId]);
      await claim('hold');
      l = await lane('hold');
      expect(l.floor).toBe(6);
      expect(await claim('hold')).toEqual([]);
      // Every member settles through the fence like any other.
      const items = settleAll([...first, ...late], 'completed');
      const accepted = await finishAttempts(f.pool, f.schema, items);
      expect(accepted.size).toBe(6);
    } finally {
      await held.end();
    }
  });

  it('a rolled-back producer leaves a gap the floor passes once its transaction is over, never a job', async () => {
    const rolled = await producer();
    try {
      await rolled.query('begin');
      await f.client.enqueue('k', { n: 'rolled' }, { client: rolled, queue: 'rb' });
      const after = (await f.client.enqueue('k', { n: 'after' }, { queue: 'rb' })).id;
      expect(ids(await claim('rb'))).toEqual([after]);
      await rolled.query('rollback');
      expect(await claim('rb')).toEqual([]);
      // The floor passes the dead position once every transaction that was running when the claim saw the
      // gap has ended (on a shared server that includes other sessions' transactions).
      await until(
        'the floor to pass the rolled-back position',
        async () => {
          expect(await claim('rb')).toEqual([]);
          return (await lane('rb')).floor === 2;
        },
        60_000,
      );
      expect(await lane('rb')).toEqual({ enq: 2, high: 2, floor: 2 });
    } finally {
      await rolled.end();
    }
  });

  it('a claim passes a tail of positions with no visible row: a late commit there is still claimed once, a rollback stops counting as available', async () => {
    const available = async (queue: string) =>
      (await f.client.counts()).find((c) => c.queue === queue)?.available ?? 0;
    const open = await producer();
    const rolled = await producer();
    try {
      await open.query('begin');
      const [lateId] = (
        await f.client.enqueueMany([{ kind: 'k', args: { n: 'late' }, options: { queue: 'tail' } }], {
          client: open,
        })
      ).map((r) => r.id);
      await rolled.query('begin');
      await f.client.enqueueMany(
        Array.from({ length: 7 }, (_, i) => ({ kind: 'k', args: { i }, options: { queue: 'tail' } })),
        { client: rolled },
      );
      await rolled.query('rollback');
      // Eight positions, no row visible: counted until a claim passes them. The first claim that finds them
      // only marks them seen (their producers may be committing this instant); the next one that still
      // finds no row there passes them.
      expect(await available('tail')).toBe(8);
      expect(await claim('tail')).toEqual([]);
      expect(await available('tail')).toBe(8);
      expect(await claim('tail')).toEqual([]);
      expect(await available('tail')).toBe(0);
      expect(await claim('tail')).toEqual([]); // heals the cached cursors from that receipt
      expect(await lane('tail')).toEqual({ enq: 8, high: 8, floor: 0 });
      // The open producer commits late: its job is claimed from the gap, once.
      await open.query('commit');
      expect(ids(await claim('tail'))).toEqual([lateId]);
      expect(await claim('tail')).toEqual([]);
      await until(
        'the floor to pass the rolled-back positions',
        async () => {
          expect(await claim('tail')).toEqual([]);
          return (await lane('tail')).floor === 8;
        },
        60_000,
      );
    } finally {
      await open.end();
      await rolled.end();
    }
  });

  it('a producer that commits between two claims is claimed as a fresh row: the claim that found it in flight recorded no gap', async () => {
    const slow = await producer();
    try {
      await slow.query('begin');
      const [slowId] = (
        await f.client.enqueueMany([{ kind: 'k', args: { n: 'slow' }, options: { queue: 'fresh' } }], {
          client: slow,
        })
      ).map((r) => r.id);
      expect(await claim('fresh')).toEqual([]);
      await slow.query('commit');
      expect(ids(await claim('fresh'))).toEqual([slowId]);
      const { rows } = await f.pool.query(
        `select count(*)::int as receipts, count(*) filter (where b.gaps is not null)::int as gapped
           from awa.claim_batches b join awa.lanes l using (lane_id) where l.queue = 'fresh'`,
      );
      expect(rows[0]).toEqual({ receipts: 1, gapped: 0 });
      expect(await lane('fresh')).toMatchObject({ enq: 1, floor: 0 });
      expect(await claim('fresh')).toEqual([]);
      expect(await lane('fresh')).toEqual({ enq: 1, high: 1, floor: 1 });
    } finally {
      await slow.end();
    }
  });

  it('a rolled-back gap is not passed while its transaction may still commit, whatever else commits', async () => {
    const open = await producer();
    try {
      await open.query('begin');
      await f.client.enqueue('k', { n: 'open' }, { client: open, queue: 'wait' });
      for (let i = 0; i < 3; i++) await f.client.enqueue('k', { i }, { queue: 'wait' });
      expect(ids(await claim('wait'))).toHaveLength(3);
      for (let i = 0; i < 3; i++) await claim('wait');
      expect((await lane('wait')).floor).toBe(0);
      await open.query('rollback');
      await until(
        'the floor to pass the rolled-back position',
        async () => {
          await claim('wait');
          return (await lane('wait')).floor === 4;
        },
        60_000,
      );
    } finally {
      await open.end();
    }
  });
});
