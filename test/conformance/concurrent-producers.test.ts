import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClaimBatch, Queryable } from '../../src/storage/operations.js';
import { until } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { claimBatches, settleAll } from '../helpers/claim.js';
import { STORAGE_VARIANTS } from './variants.js';

// Producers of one lane in their own transactions do not wait for each other; claim skips positions whose
// producer is still in flight, comes back for them once they commit, and passes the positions of producers
// that rolled back. Each statement below would hang (or the claim would come back wrong) on the engine that
// held the lane's enqueue lock until commit.

const ids = (batches: ClaimBatch[]) => batches.flatMap((b) => b.jobs.map((j) => j.id));

describe.each(STORAGE_VARIANTS)('concurrent producers ($name storage)', (variant) => {
  let f: StorageFixture;
  const claim = (queue: string, max = 100, db: Queryable = f.pool) =>
    claimBatches(f.storage, db, {
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
         from awa.lanes where queue = $1 and priority = 2 and not bulk`,
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
    f = await storageFixture('producers', variant);
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
      const accepted = await f.storage.settler.settleAttempts(f.pool, items);
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

  it('a claim passes a tail of positions with no visible row only once no producer can still commit there: the late commit is claimed fresh, once; the rollback stops counting as available', async () => {
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
      // only marks them seen; while a producer of the lane is in flight (the open one) the tail is kept, so
      // its job is claimed as a fresh row when it commits rather than out of a gap.
      expect(await available('tail')).toBe(8);
      expect(await claim('tail')).toEqual([]);
      expect(await claim('tail')).toEqual([]);
      expect(await available('tail')).toBe(8);
      expect(await lane('tail')).toEqual({ enq: 8, high: 0, floor: 0 });
      await open.query('commit');
      expect(ids(await claim('tail'))).toEqual([lateId]);
      const { rows } = await f.pool.query(
        `select count(*)::int as gapped from awa.claim_batches b join awa.lanes l using (lane_id)
          where l.queue = 'tail' and b.gaps is not null`,
      );
      expect(rows[0]).toEqual({ gapped: 0 });
      // Now nobody can commit there: the next claim that finds the lane quiet passes the rolled-back tail.
      expect(await claim('tail')).toEqual([]);
      expect(await available('tail')).toBe(0);
      await until(
        'the floor to pass the rolled-back positions',
        async () => {
          expect(await claim('tail')).toEqual([]);
          return (await lane('tail')).floor === 8;
        },
        60_000,
      );
      expect(await lane('tail')).toEqual({ enq: 8, high: 8, floor: 8 });
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
  it('single producers share the reservation lock and blocks take it alone: positions stay distinct, a block stays contiguous', async () => {
    await f.client.enqueue('k', { n: 'first' }, { queue: 'share' }); // creates the lanes
    const { rows: laneRows } = await f.pool.query(
      `select lane_id from awa.lanes where queue = 'share' and priority = 2 and not bulk`,
    );
    const laneId = laneRows[0]!.lane_id as number;
    // A draw in progress: another session holds the lane's reservation lock the way a single producer does.
    const drawing = await producer();
    const block = await producer();
    try {
      await drawing.query('begin');
      await drawing.query(`select pg_advisory_xact_lock_shared(awa.lock_ns('reserve'), $1)`, [laneId]);
      // A single job is drawn beside it, at once.
      const single = await producer();
      try {
        await single.query(`set lock_timeout = '2s'`);
        await single.query('begin');
        await f.client.enqueue('k', { n: 'single' }, { client: single, queue: 'share' });
        await single.query('commit');
      } finally {
        await single.end();
      }
      // A block needs the lock to itself: it waits for the draw (here, until lock_timeout says so).
      await block.query(`set lock_timeout = '300ms'`);
      const jobs = [1, 2, 3].map((n) => ({ kind: 'k', args: { n }, options: { queue: 'share' } }));
      await expect(f.client.enqueueMany(jobs, { client: block })).rejects.toThrow(/lock timeout/);
      await drawing.query('commit');
      await f.client.enqueueMany(jobs, { client: block });
    } finally {
      await drawing.end();
      await block.end();
    }

    // Many of both at once, each in its own transaction: every position is handed out once, and each block's
    // positions are consecutive.
    const clients = await Promise.all(Array.from({ length: 12 }, () => producer()));
    const blocks: string[][] = [];
    try {
      await Promise.all(
        clients.map(async (c, i) => {
          for (let round = 0; round < 10; round++) {
            await c.query('begin');
            if (i % 3 === 0) {
              const batch = Array.from({ length: 20 }, (_, n) => ({
                kind: 'k',
                args: { i, round, n },
                options: { queue: 'share' },
              }));
              blocks.push((await f.client.enqueueMany(batch, { client: c })).map((r) => r.id));
            } else {
              await f.client.enqueue('k', { i, round }, { client: c, queue: 'share' });
            }
            await c.query('commit');
          }
        }),
      );
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
    const { rows } = await f.pool.query<{ id: string; seq: string }>(
      `select job_id::text as id, lane_seq::text as seq from awa.ready_entries where lane_id = $1`,
      [laneId],
    );
    const seqOf = new Map(rows.map((r) => [r.id, Number(r.seq)]));
    // 1 + 1 + 3 before, then 8 producers × 10 singles and 4 × 10 blocks of 20.
    expect(rows).toHaveLength(5 + 80 + 800);
    expect(new Set(rows.map((r) => r.seq)).size).toBe(rows.length);
    expect((await lane('share')).enq).toBe(rows.length);
    expect(blocks).toHaveLength(40);
    for (const b of blocks) {
      const seqs = b.map((id) => seqOf.get(id)!);
      expect(seqs).toEqual(seqs.map((_, n) => seqs[0]! + n));
    }
  });

  it("a gap's horizon lies above its producer while that producer is in flight, read from the lock table", async () => {
    const held = await producer();
    try {
      await held.query('begin');
      await f.client.enqueue('k', { n: 'held' }, { client: held, queue: 'horizon' });
      const { rows: xid } = await held.query(`select pg_current_xact_id()::text::bigint::text as xid`);
      const after = (await f.client.enqueue('k', { n: 'after' }, { queue: 'horizon' })).id;
      expect(ids(await claim('horizon'))).toEqual([after]);
      const { rows } = await f.pool.query(
        `select b.gaps::text, b.gap_horizon::text as horizon
           from awa.claim_batches b join awa.lanes l using (lane_id) where l.queue = 'horizon'`,
      );
      expect(rows).toHaveLength(1);
      expect(rows[0].gaps).toBe('{[1,2)}');
      expect(BigInt(rows[0].horizon)).toBeGreaterThan(BigInt(xid[0].xid));
      // And the lock table lists exactly that producer for the lane, until it ends.
      const producers = async () =>
        (
          await f.pool.query(
            `select awa.lane_producers(lane_id)::text as oldest from awa.lanes
              where queue = 'horizon' and priority = 2 and not bulk`,
          )
        ).rows[0].oldest as string;
      expect(await producers()).toBe(xid[0].xid);
      await held.query('commit');
      expect(await producers()).toBe('9223372036854775807');
    } finally {
      await held.end();
    }
  });

  it('claims inside one REPEATABLE READ transaction never pass a gap whose producer committed after its snapshot', async () => {
    const p = await producer();
    const t = await producer();
    try {
      await p.query('begin');
      const lateId = (await f.client.enqueue('k', { n: 'late' }, { client: p, queue: 'rr' })).id;
      const q = (await f.client.enqueue('k', { n: 'q' }, { queue: 'rr' })).id;
      await t.query('begin isolation level repeatable read');
      await t.query('select 1'); // the snapshot: q committed, the late job not
      await p.query('commit');
      // The first claim records position 1 as a gap; its producer has ended by now, so the lock table no
      // longer lists it. The claimer's own id in the horizon keeps the second claim, in the same old
      // snapshot, from taking the invisible position for dead.
      expect(ids(await claim('rr', 100, t))).toEqual([q]);
      expect(await claim('rr', 100, t)).toEqual([]);
      await t.query('commit');
      expect(ids(await claim('rr'))).toEqual([lateId]);
      expect(await claim('rr')).toEqual([]);
      expect(await lane('rr')).toEqual({ enq: 2, high: 2, floor: 2 });
    } finally {
      await p.end();
      await t.end();
    }
  });
});
