import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError, defineJob, type JobInput } from '../../src/index.js';
import { claimBatches } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { STORAGE_VARIANTS } from './variants.js';

// Transactions a producer hands us are really used (issue 8, item 3): copyEnqueue({ client }) needs an open
// transaction and runs under a savepoint in it; a client inside one job's options is refused, not ignored;
// two bulk producers that reach the same lanes in opposite orders, each in an open transaction, never wait
// for each other.

const item = defineJob<{ n: number }>({ kind: 'tx_item', queue: 'tx_default' });
const jobs = (queue: string, n: number, from = 0): JobInput[] =>
  Array.from({ length: n }, (_, i) => ({ kind: item, args: { n: from + i }, options: { queue } }));

describe.each(STORAGE_VARIANTS)('producer transactions ($name storage)', (variant) => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('producer_tx', variant);
  });
  afterAll(async () => {
    await f.close();
  });

  const stored = async (queue: string) =>
    Number(
      (await f.pool.query(`select count(*) as n from awa.ready_entries where queue = $1`, [queue])).rows[0].n,
    );
  const claimAll = async (queue: string) =>
    (
      await claimBatches(f.storage, f.pool, {
        queue,
        max: 10_000,
        instanceId: 'tx-test',
        agingSeconds: 3600,
        deadlineSeconds: 0,
      })
    ).flatMap((b) => b.jobs.map((j) => (j.args as { n: number }).n));
  async function withConn<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    const c = await f.pool.connect();
    try {
      return await fn(c);
    } finally {
      c.release();
    }
  }

  it('copyEnqueue({ client }) on a client with no open transaction is refused before anything is written', async () => {
    await withConn(async (c) => {
      const err = await f.client.copyEnqueue(jobs('tx_none', 100), { client: c }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: 'AWA_TRANSACTION_REQUIRED' });
      expect((err as Error).message).toContain('needs an open transaction on that client');
      // Not left inside a transaction of ours either.
      expect((await c.query(`select now() = statement_timestamp() as outside`)).rows[0].outside).toBe(true);
    });
    expect(await stored('tx_none')).toBe(0);
  });

  it("a copyEnqueue that fails midway inside the caller's transaction undoes only its own rows; the transaction goes on", async () => {
    await withConn(async (c) => {
      await c.query('begin');
      await f.client.copyEnqueue(jobs('tx_savepoint', 10), { client: c });
      function* failing() {
        yield* jobs('tx_savepoint', 50, 100);
        throw new Error('the source broke');
      }
      await expect(f.client.copyEnqueue(failing(), { client: c, chunkSize: 20 })).rejects.toThrow(
        'the source broke',
      );
      await f.client.copyEnqueue(jobs('tx_savepoint', 5, 200), { client: c });
      await c.query('commit');
    });
    // The first and last loads, in order; none of the failed one (two of its chunks had been COPYed).
    expect(await claimAll('tx_savepoint')).toEqual([
      ...Array.from({ length: 10 }, (_, i) => i),
      ...Array.from({ length: 5 }, (_, i) => 200 + i),
    ]);
  });

  it('a client inside one job’s options is refused by enqueueMany and copyEnqueue, naming where it goes', async () => {
    await withConn(async (c) => {
      await c.query('begin');
      const perJob = [
        ...jobs('tx_perjob', 2),
        { kind: item, args: { n: 9 }, options: { queue: 'tx_perjob', client: c } as never },
      ];
      for (const call of [
        () => f.client.enqueueMany(perJob),
        () => f.client.copyEnqueue(perJob),
        () => f.client.enqueueMany(perJob, { client: c }),
        () => f.client.copyEnqueue(perJob, { client: c }),
      ]) {
        const err = await call().then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(InvalidOptionError);
        expect((err as Error).message).toContain('options.client');
        expect((err as Error).message).toContain('second argument of enqueueMany or copyEnqueue');
      }
      await c.query('commit');
    });
    expect(await stored('tx_perjob')).toBe(0);
  });

  it('two bulk producers reaching the same lanes in opposite orders, each holding its transaction open, both finish', async () => {
    // Each lane created beforehand: lane creation is not what this is about.
    await f.client.enqueueMany([...jobs('tx_lane_a', 1, -1), ...jobs('tx_lane_b', 1, -1)]);
    const a = await f.pool.connect();
    const b = await f.pool.connect();
    try {
      await a.query('begin');
      await b.query('begin');
      // Interleaved so that, if reserving a lane held anything to commit, each would wait for the other.
      await f.client.copyEnqueue(jobs('tx_lane_a', 1000, 0), { client: a });
      await f.client.copyEnqueue(jobs('tx_lane_b', 1000, 10_000), { client: b });
      const [ra, rb] = await Promise.all([
        f.client.copyEnqueue(jobs('tx_lane_b', 1000, 1000), { client: a }),
        f.client.copyEnqueue(jobs('tx_lane_a', 1000, 11_000), { client: b }),
      ]);
      expect(ra).toEqual({ inserted: 1000, duplicates: 0 });
      expect(rb).toEqual({ inserted: 1000, duplicates: 0 });
      // One chunk holding both lanes, in opposite orders, at the same time.
      const [ra2, rb2] = await Promise.all([
        f.client.copyEnqueue([...jobs('tx_lane_a', 500, 2000), ...jobs('tx_lane_b', 500, 2000)], {
          client: a,
        }),
        f.client.copyEnqueue([...jobs('tx_lane_b', 500, 12_000), ...jobs('tx_lane_a', 500, 12_000)], {
          client: b,
        }),
      ]);
      expect([ra2.inserted, rb2.inserted]).toEqual([1000, 1000]);
      await a.query('commit');
      await b.query('commit');
    } finally {
      a.release();
      b.release();
    }
    // Everything committed and runs, each producer's rows in its own order within a lane.
    for (const queue of ['tx_lane_a', 'tx_lane_b']) {
      const got = (await claimAll(queue)).filter((n) => n >= 0);
      expect(got).toHaveLength(3000);
      const fromA = got.filter((n) => n < 10_000);
      const fromB = got.filter((n) => n >= 10_000);
      expect(fromA).toEqual([...fromA].sort((x, y) => x - y));
      expect(fromB).toEqual([...fromB].sort((x, y) => x - y));
    }
  });
});
