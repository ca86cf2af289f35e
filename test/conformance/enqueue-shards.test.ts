import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/index.js';
import type { ClaimBatch } from '../../src/storage/operations.js';
import { settleAll } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { STORAGE_VARIANTS } from './variants.js';

// Enqueue shards: a queue split into S lanes per priority. Producers take the shards in turn; claimers skip a
// lane another claimer holds, so several claim the queue side by side; FIFO holds per lane.

describe.each(STORAGE_VARIANTS)('enqueue shards ($name storage)', (variant) => {
  let f: StorageFixture;
  const req = (queue: string, max: number) => ({
    queue,
    max,
    instanceId: 'test',
    agingSeconds: 3600,
    deadlineSeconds: 0,
    waitMs: 20,
  });
  /** Each claimed job with the lane (shard) and position its row holds. */
  const placed = async (batches: ClaimBatch[]) => {
    const ids = batches.flatMap((b) => b.jobs.map((j) => j.id));
    const { rows } = await f.pool.query<{ id: string; shard: number; lane_seq: string }>(
      `select r.job_id::text as id, l.shard, r.lane_seq::text
         from awa.ready_entries r join awa.lanes l using (lane_id)
        where r.job_id = any($1::bigint[])`,
      [ids],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    return ids.map((id) => ({ id, shard: byId.get(id)!.shard, seq: Number(byId.get(id)!.lane_seq) }));
  };

  beforeAll(async () => {
    f = await storageFixture('shards', variant);
  });
  afterAll(async () => {
    await f.close();
  });

  it('spreads enqueues over the shards in turn, and each lane is claimed in its own enqueue order', async () => {
    expect(await f.client.setEnqueueShards('sh_spread', 4, { create: true })).toBe(1);
    const { rows: lanes } = await f.pool.query<{ shard: number; n: string }>(
      `select shard, count(*) as n from awa.lanes where queue = 'sh_spread' group by shard order by shard`,
    );
    // Created by the setting, not by a producer: four priorities per shard (live lanes: the queue has had no
    // bulk load, so it has no bulk lanes).
    expect(lanes.map((l) => [l.shard, Number(l.n)])).toEqual([
      [0, 4],
      [1, 4],
      [2, 4],
      [3, 4],
    ]);
    const order: string[] = [];
    for (let i = 0; i < 40; i++) order.push((await f.client.enqueue('s', { i }, { queue: 'sh_spread' })).id);

    const claimed: ClaimBatch[] = [];
    for (let round = 0; round < 20; round++) {
      const got = (await f.storage.claimer.claim(f.pool, req('sh_spread', 7))).batches;
      if (got.length === 0) break;
      claimed.push(...got);
    }
    const jobs = await placed(claimed);
    expect(jobs.map((j) => j.id).sort()).toEqual([...order].sort());
    // One enqueue after another: shards 0,1,2,3,0,… exactly (the rotor is the database's, not a client's).
    const counts = [0, 1, 2, 3].map((s) => jobs.filter((j) => j.shard === s).length);
    expect(counts).toEqual([10, 10, 10, 10]);
    for (const s of [0, 1, 2, 3]) {
      const lane = jobs.filter((j) => j.shard === s);
      // Claimed in lane order, which is the order they were enqueued in.
      expect(lane.map((j) => j.seq)).toEqual([...lane.map((j) => j.seq)].sort((a, b) => a - b));
      expect(lane.map((j) => j.id)).toEqual(order.filter((id) => lane.some((j) => j.id === id)));
    }
  });

  it('a claimer holding one shard does not hold up another: it claims a different shard at once', async () => {
    for (const [queue, shards] of [
      ['sh_side', 2],
      ['sh_single', 1],
    ] as const) {
      if (shards > 1) await f.client.setEnqueueShards(queue, shards, { create: true });
      for (let i = 0; i < 6; i++) await f.client.enqueue('s', { i }, { queue });
    }
    const holder = await f.pool.connect();
    try {
      for (const queue of ['sh_side', 'sh_single']) {
        // The first claim's transaction stays open, holding the lane it claimed.
        await holder.query('begin');
        const first = await f.storage.claimer.claim(holder, req(queue, 2));
        expect(first.batches.flatMap((b) => b.jobs)).toHaveLength(2);
        const second = await f.storage.claimer.claim(f.pool, req(queue, 2));
        if (queue === 'sh_side') {
          expect(second.batches.flatMap((b) => b.jobs)).toHaveLength(2);
          const [a] = await placed(first.batches);
          const [b] = await placed(second.batches);
          expect(a!.shard).not.toBe(b!.shard);
        } else {
          // One lane: the second claimer can only wait for it and come back empty-handed (contended).
          expect(second).toEqual({ batches: [], contended: true, rateLimited: false });
        }
        await holder.query('commit');
      }
    } finally {
      holder.release();
    }
  });

  it('four claimers on their own connections drain a sharded queue exactly once', async () => {
    await f.client.setEnqueueShards('sh_race', 4, { create: true });
    await f.client.copyEnqueue(
      Array.from({ length: 4000 }, (_, i) => ({ kind: 'r', args: { i }, options: { queue: 'sh_race' } })),
      { chunkSize: 500 },
    );
    const pools = [1, 2, 3, 4].map(() =>
      new pg.Pool({ connectionString: f.url, max: 1 }).on('error', () => {}),
    );
    try {
      const mine = await Promise.all(
        pools.map(async (p) => {
          const ids: string[] = [];
          for (let idle = 0; idle < 5;) {
            const { batches } = await f.storage.claimer.claim(p, req('sh_race', 100));
            const n = batches.reduce((a, b) => a + b.jobs.length, 0);
            if (n > 0) await f.storage.settler.settleAttempts(p, settleAll(batches, 'completed'));
            ids.push(...batches.flatMap((b) => b.jobs.map((j) => j.id)));
            idle = n === 0 ? idle + 1 : 0;
          }
          return ids;
        }),
      );
      const all = mine.flat();
      expect(all).toHaveLength(4000);
      expect(new Set(all).size).toBe(4000);
      // The first COPY gave the queue its bulk lanes, one per live lane.
      const { rows: kinds } = await f.pool.query<{ bulk: boolean; n: number }>(
        `select bulk, count(*)::int as n from awa.lanes where queue = 'sh_race' group by bulk order by bulk`,
      );
      expect(kinds).toEqual([
        { bulk: false, n: 16 },
        { bulk: true, n: 16 },
      ]);
      // COPY chunks of 500 took the shards' bulk lanes in turn: each shard got 1,000 jobs.
      const { rows } = await f.pool.query<{ shard: number; n: string }>(
        `select l.shard, count(*) as n from awa.ready_entries r join awa.lanes l using (lane_id)
          where l.queue = 'sh_race' group by l.shard order by l.shard`,
      );
      expect(rows.map((r) => Number(r.n))).toEqual([1000, 1000, 1000, 1000]);
      const counts = await f.client.counts();
      expect(counts.find((c) => c.queue === 'sh_race')).toMatchObject({
        available: 0,
        running: 0,
        completed: 4000,
      });
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });

  it('more shards for a queue already in use: its next jobs spread over the new shards too', async () => {
    await f.client.enqueue('s', { i: 0 }, { queue: 'sh_grow' });
    expect(await f.client.setEnqueueShards('sh_grow', 2)).toBe(1);
    // Producers read the count from the lane rows: every row of the queue carries the new one.
    const { rows: counts } = await f.pool.query<{ enqueue_shards: number; n: string }>(
      `select enqueue_shards, count(*) as n from awa.lanes where queue = 'sh_grow' group by enqueue_shards`,
    );
    expect(counts.map((r) => [r.enqueue_shards, Number(r.n)])).toEqual([[2, 8]]);
    for (let i = 1; i <= 6; i++) await f.client.enqueue('s', { i }, { queue: 'sh_grow' });
    const jobs = await placed((await f.storage.claimer.claim(f.pool, req('sh_grow', 100))).batches);
    expect(jobs).toHaveLength(7);
    expect([0, 1].map((s) => jobs.filter((j) => j.shard === s).length)).toEqual([4, 3]);
  });

  it('fewer shards: producers stop using the higher ones, and the jobs already there still run', async () => {
    await f.client.setEnqueueShards('sh_shrink', 4, { create: true });
    for (let i = 0; i < 8; i++) await f.client.enqueue('s', { i }, { queue: 'sh_shrink' });
    expect(await f.client.setEnqueueShards('sh_shrink', 1)).toBe(4);
    const later: string[] = [];
    for (let i = 0; i < 4; i++) later.push((await f.client.enqueue('s', { i }, { queue: 'sh_shrink' })).id);
    const { batches } = await f.storage.claimer.claim(f.pool, req('sh_shrink', 100));
    const jobs = await placed(batches);
    expect(jobs).toHaveLength(12);
    expect(jobs.filter((j) => later.includes(j.id)).map((j) => j.shard)).toEqual([0, 0, 0, 0]);
    expect(new Set(jobs.map((j) => j.shard))).toEqual(new Set([0, 1, 2, 3]));
    const health = await f.client.queueHealth();
    expect(health.find((q) => q.queue === 'sh_shrink')).toMatchObject({ enqueueShards: 1, running: 12 });
  });

  it('rejects a shard count outside 1..64 or not whole, naming the field, and changes nothing', async () => {
    for (const bad of [0, 65, 2.5, Number.NaN, '4' as unknown as number]) {
      await expect(f.client.setEnqueueShards('sh_bad', bad)).rejects.toThrow(InvalidOptionError);
      await expect(f.client.setEnqueueShards('sh_bad', bad)).rejects.toThrow(/shards/);
    }
    await expect(f.client.setEnqueueShards('', 2)).rejects.toThrow(InvalidOptionError);
    const { rows } = await f.pool.query(`select 1 from awa.queue_settings where queue = 'sh_bad'`);
    expect(rows).toEqual([]);
  });
});
