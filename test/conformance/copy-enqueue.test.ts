import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineJob, InvalidArgsError, InvalidOptionError } from '../../src/index.js';
import { z } from 'zod';
import { claimBatches } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { STORAGE_VARIANTS } from './variants.js';

const item = defineJob({ kind: 'bulk_item', queue: 'bulk', schema: z.object({ n: z.number().int() }) });

describe.each(STORAGE_VARIANTS)('COPY enqueue ($name storage)', (variant) => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('copy', variant);
  });
  afterAll(async () => {
    await f.close();
  });

  it('streams 100k jobs from a generator in bounded chunks, in lane order', async () => {
    const progress: number[] = [];
    const total = await f.client.copyEnqueue(
      (function* () {
        for (let n = 0; n < 100_000; n++) yield { kind: item, args: { n } };
      })(),
      { chunkSize: 25_000, onProgress: (n) => progress.push(n) },
    );
    expect(total).toEqual({ inserted: 100_000, duplicates: 0 });
    expect(progress).toEqual([25_000, 50_000, 75_000, 100_000]);
    const { rows } = await f.pool.query(
      `select count(*)::int as n, count(distinct job_id)::int as ids,
              bool_and((args->>'n')::bigint = lane_seq - 1) as in_order
         from awa.ready_entries where queue = 'bulk'`,
    );
    expect(rows[0]).toEqual({ n: 100_000, ids: 100_000, in_order: true });
    expect((await f.client.counts()).find((c) => c.queue === 'bulk')?.available).toBe(100_000);
  });

  it('a load of thousands of blocks in one transaction fits the server lock table, and is claimed whole', async () => {
    // 16,000 blocks of two rows over sixteen lanes (each chunk of 32 rows: two for each lane): naming every
    // block in flight took two lock-table entries each to the transaction's end, 32,000 in all, far past the
    // server's 6,400 ("out of shared memory").
    const queues = ['blocks_a', 'blocks_b', 'blocks_c', 'blocks_d'];
    const rows = Array.from({ length: 32_000 }, (_, n) => ({
      kind: 'blocky',
      args: { n },
      options: { queue: queues[(n >> 1) % 4]!, priority: (((n >> 3) % 4) + 1) as 1 | 2 | 3 | 4 },
    }));
    expect(await f.client.copyEnqueue(rows, { chunkSize: 32 })).toEqual({ inserted: 32_000, duplicates: 0 });
    const claimed: string[] = [];
    for (const queue of queues) {
      for (;;) {
        const batches = await claimBatches(f.storage, f.pool, {
          queue,
          max: 4_000,
          instanceId: 'blocks',
          agingSeconds: 3600,
          deadlineSeconds: 0,
        });
        const ids = batches.flatMap((b) => b.jobs.map((j) => j.id));
        if (ids.length === 0) break;
        claimed.push(...ids);
      }
    }
    expect(new Set(claimed).size).toBe(32_000);
  });

  it('routes mixed queues, priorities and future jobs, with backslashes and unicode intact', async () => {
    const runAt = new Date(Date.now() + 60_000);
    const total = await f.client.copyEnqueue([
      {
        kind: 'mixed',
        args: { path: 'C:\\tmp\\x', text: 'tab\there "quoted" ü' },
        options: { queue: 'mx', priority: 1 },
      },
      { kind: 'mixed', args: { n: 2 }, options: { queue: 'mx', priority: 4, tags: ['t'] } },
      { kind: 'mixed', args: { n: 3 }, options: { queue: 'my', runAt } },
    ]);
    expect(total).toEqual({ inserted: 3, duplicates: 0 });
    const { rows } = await f.pool.query(
      `select queue, priority, args, meta from awa.ready_entries where kind = 'mixed' order by priority`,
    );
    expect(rows).toEqual([
      { queue: 'mx', priority: 1, args: { path: 'C:\\tmp\\x', text: 'tab\there "quoted" ü' }, meta: null },
      { queue: 'mx', priority: 4, args: { n: 2 }, meta: { tags: ['t'] } },
    ]);
    const deferred = await f.pool.query(
      `select queue, state, run_at from awa.deferred_jobs where kind = 'mixed'`,
    );
    expect(deferred.rows).toEqual([{ queue: 'my', state: 'scheduled', run_at: runAt }]);
  });

  it("inside the caller's transaction, a rollback removes the whole load", async () => {
    const conn = await f.pool.connect();
    try {
      await conn.query('begin');
      const n = await f.client.copyEnqueue(
        Array.from({ length: 5000 }, (_, i) => ({
          kind: item,
          args: { n: i },
          options: { queue: 'rolled' },
        })),
        { client: conn },
      );
      expect(n).toEqual({ inserted: 5000, duplicates: 0 });
      await conn.query('rollback');
    } finally {
      conn.release();
    }
    const { rows } = await f.pool.query(
      `select count(*)::int as n from awa.ready_entries where queue = 'rolled'`,
    );
    expect(rows[0].n).toBe(0);
  });

  it('validates every row and writes nothing when one is invalid', async () => {
    const rows = [
      { kind: item, args: { n: 1 }, options: { queue: 'bad' } },
      { kind: item, args: { n: 'x' }, options: { queue: 'bad' } },
    ];
    await expect(f.client.copyEnqueue(rows)).rejects.toBeInstanceOf(InvalidArgsError);
    const { rows: left } = await f.pool.query(
      `select count(*)::int as n from awa.ready_entries where queue = 'bad'`,
    );
    expect(left[0].n).toBe(0);
  });

  it('rolls back the chunks already written when a later chunk fails in the database', async () => {
    // The database refuses one kind (a check constraint of this test's own): the first three chunks of two
    // are written by COPY before the fourth one fails on the server.
    await f.pool.query(
      `alter table awa.ready_entries add constraint copy_test_poison check (kind <> 'copy_poison')`,
    );
    try {
      const written: number[] = [];
      const rows = (function* () {
        for (let n = 0; n < 6; n++) yield { kind: 'copy_ok', args: { n }, options: { queue: 'bad_late' } };
        yield { kind: 'copy_poison', args: { n: 6 }, options: { queue: 'bad_late' } };
        yield { kind: 'copy_ok', args: { n: 7 }, options: { queue: 'bad_late' } };
      })();
      await expect(
        f.client.copyEnqueue(rows, { chunkSize: 2, onProgress: (n) => written.push(n) }),
      ).rejects.toThrow(/copy_test_poison/);
      // Three chunks did reach the database before the failure…
      expect(written).toEqual([2, 4, 6]);
    } finally {
      await f.pool.query(`alter table awa.ready_entries drop constraint copy_test_poison`);
    }
    // …and none of their rows is left: not in the ring, not to a claim, not in the job list.
    const { rows: left } = await f.pool.query(
      `select count(*)::int as n from awa.ready_entries where queue = 'bad_late'`,
    );
    expect(left[0].n).toBe(0);
    const claim = () =>
      claimBatches(f.storage, f.pool, {
        queue: 'bad_late',
        max: 100,
        instanceId: 'copy-test',
        agingSeconds: 60,
        deadlineSeconds: 0,
      });
    expect(await claim()).toEqual([]);
    expect(await f.client.listJobs({ state: 'available', queue: 'bad_late' })).toEqual([]);
    // The second claim to find the rolled-back positions without a row passes them (the first only marks
    // them seen): they no longer count as available.
    expect(await claim()).toEqual([]);
    expect((await f.client.counts()).find((c) => c.queue === 'bad_late')?.available ?? 0).toBe(0);
  });

  it('takes async iterables and async schemas in input order (enqueueMany too), and refuses input that is not iterable', async () => {
    // An async schema makes the row a promise; a sync one does not: mixed in one load, order must hold.
    const checked = defineJob({
      kind: 'bulk_checked',
      queue: 'bulk_async',
      schema: z.object({ n: z.number().int() }).refine(async (v) => v.n >= 0, 'n must not be negative'),
    });
    const plain = defineJob({ kind: 'bulk_plain', queue: 'bulk_async' });
    async function* jobs() {
      for (let n = 0; n < 1_000; n++) yield { kind: n % 3 === 0 ? checked : plain, args: { n } };
    }
    expect(await f.client.copyEnqueue(jobs(), { chunkSize: 300 })).toEqual({
      inserted: 1_000,
      duplicates: 0,
    });
    const syncInput = Array.from({ length: 1_000 }, (_, i) => ({
      kind: i % 3 === 0 ? checked : plain,
      args: { n: 1_000 + i },
    }));
    expect(await f.client.copyEnqueue(syncInput, { chunkSize: 300 })).toEqual({
      inserted: 1_000,
      duplicates: 0,
    });
    const { rows } = await f.pool.query(
      `select count(*)::int as n, bool_and((args->>'n')::bigint = lane_seq - 1) as in_order
         from awa.ready_entries where queue = 'bulk_async'`,
    );
    expect(rows[0]).toEqual({ n: 2_000, in_order: true });
    await expect(
      f.client.copyEnqueue([
        { kind: plain, args: { n: 1 } },
        { kind: checked, args: { n: -1 } },
      ]),
    ).rejects.toThrow(/n must not be negative/);
    // enqueueMany builds its rows the same way: mixed sync and async checks, results in input order.
    const many = await f.client.enqueueMany(
      Array.from({ length: 6 }, (_, i) => ({
        kind: i % 2 === 0 ? checked : plain,
        args: { n: 5_000 + i },
        options: { queue: 'bulk_many' },
      })),
    );
    const { rows: manyRows } = await f.pool.query<{ id: string; n: number }>(
      `select job_id::text as id, (args->>'n')::int as n from awa.ready_entries where queue = 'bulk_many'
        order by lane_seq`,
    );
    expect(manyRows.map((r) => r.n)).toEqual([5_000, 5_001, 5_002, 5_003, 5_004, 5_005]);
    expect(many.map((r) => r.id)).toEqual(manyRows.map((r) => r.id));
    await expect(
      f.client.enqueueMany([
        { kind: plain, args: { n: 1 }, options: { queue: 'bulk_many' } },
        { kind: checked, args: { n: -1 }, options: { queue: 'bulk_many' } },
      ]),
    ).rejects.toBeInstanceOf(InvalidArgsError);
    for (const bad of [null, 42, { kind: plain, args: {} }]) {
      const err = await f.client.copyEnqueue(bad as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidOptionError);
      expect((err as InvalidOptionError).field).toBe('jobs');
    }
    const { rows: after } = await f.pool.query(
      `select count(*)::int as n from awa.ready_entries where queue = 'bulk_async'`,
    );
    expect(after[0].n).toBe(2_000);
  });
});
