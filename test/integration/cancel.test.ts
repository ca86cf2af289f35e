import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settleAttempts, type ClaimBatch } from '../../src/storage/operations.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';
import { claimBatches, settleAll } from '../helpers/claim.js';

// Operator cancel against the storage engine: a cancelled waiting job is never claimed (its position is
// consumed by the next claim), a cancel racing a claim has exactly one winner, and a retryable job's cancel
// ends it before its next run.

const ids = (batches: ClaimBatch[]) => batches.flatMap((b) => b.jobs.map((j) => j.id));

describe('cancel', () => {
  let f: StorageFixture;
  const claim = (queue: string, db: pg.Pool | pg.Client = f.pool, max = 100) =>
    claimBatches(f.storage, db, {
      queue,
      max,
      instanceId: 'cancel-test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
  const settle = (batches: ClaimBatch[], outcome: 'completed' | 'retry') =>
    settleAttempts(
      f.pool,
      f.schema,
      settleAll(batches, outcome, outcome === 'retry' ? { runAt: new Date(Date.now() + 3_600_000) } : {}),
    );

  beforeAll(async () => {
    f = await storageFixture('cancel');
  });
  afterAll(async () => {
    await f.close();
  });

  it('a cancelled waiting job is skipped by the claim that reaches its position, and never runs', async () => {
    const [a, b, c] = (
      await f.client.enqueueMany([1, 2, 3].map((n) => ({ kind: 'k', args: { n }, options: { queue: 'cw' } })))
    ).map((r) => r.id);
    expect(await f.client.cancel(b!)).toBe('available');
    const batches = await claim('cw');
    expect(ids(batches)).toEqual([a, c]);
    // The range covered the cancelled position: it is consumed, not left behind.
    expect(await claim('cw')).toEqual([]);
    expect((await f.client.counts()).find((x) => x.queue === 'cw')).toMatchObject({
      available: 0,
      running: 2,
      cancelled: 1,
    });
    expect((await f.client.getJob(b!))?.state).toBe('cancelled');
    expect(await f.client.cancel(b!)).toBeNull();
  });

  // A claim that reaches only cancelled rows hands out nothing but still writes its empty receipt: that is what
  // moves the lane's high-water past them, so the next claim starts at the job after them.
  it('a claim that reaches only cancelled jobs returns none, and the next job of the lane is claimed after them', async () => {
    const cancelled = (
      await f.client.enqueueMany([1, 2].map((n) => ({ kind: 'k', args: { n }, options: { queue: 'cx' } })))
    ).map((r) => r.id);
    for (const id of cancelled) expect(await f.client.cancel(id)).toBe('available');
    const receipts = async () =>
      Number(
        (
          await f.pool.query<{ n: string }>(
            `select count(*) as n from ${f.schema.ident}.claim_batches b
               join ${f.schema.ident}.lanes l on l.lane_id = b.lane_id where l.queue = 'cx'`,
          )
        ).rows[0]!.n,
      );
    expect(await receipts()).toBe(0);
    expect(await claim('cx')).toEqual([]);
    expect(await receipts()).toBe(1);
    const next = (await f.client.enqueue('k', { n: 3 }, { queue: 'cx' })).id;
    expect(ids(await claim('cx'))).toEqual([next]);
    expect(await claim('cx')).toEqual([]);
    for (const id of cancelled) expect((await f.client.getJob(id))?.state).toBe('cancelled');
  });

  it('a cancel racing a claim: either the claim never gets the job, or the cancel closes the claimed attempt', async () => {
    const racer = new pg.Client({ connectionString: f.url });
    await racer.connect();
    try {
      const tally = { beforeClaim: 0, afterClaim: 0 };
      for (let i = 0; i < 40; i++) {
        const { id } = await f.client.enqueue('k', { i }, { queue: 'crace' });
        const [from, batches] = await Promise.all([f.client.cancel(id), claim('crace', racer)]);
        const claimed = ids(batches).includes(id);
        if (from === 'available') {
          tally.beforeClaim++;
          expect(claimed).toBe(false);
        } else {
          tally.afterClaim++;
          expect(from).toBe('running');
          expect(claimed).toBe(true);
          // The claimed attempt was closed by the cancel: its completion is stale.
          expect((await settle(batches, 'completed')).size).toBe(0);
        }
        expect((await f.client.getJob(id))?.state).toBe('cancelled');
        expect(await claim('crace')).toEqual([]);
      }
      expect(tally.beforeClaim + tally.afterClaim).toBe(40);
    } finally {
      await racer.end();
    }
  });

  it('a retryable job cancelled before its retry ends cancelled and is never run again', async () => {
    const { id } = await f.client.enqueue('k', {}, { queue: 'cretry' });
    const first = await claim('cretry');
    expect(ids(first)).toEqual([id]);
    expect((await settle(first, 'retry')).has(id)).toBe(true);
    expect((await f.client.getJob(id))?.state).toBe('retryable');
    expect(await f.client.cancel(id, 'not worth retrying')).toBe('retryable');
    const job = await f.client.getJob(id);
    expect(job?.state).toBe('cancelled');
    expect(job?.meta?.errors?.at(-1)?.error).toBe('not worth retrying');
    // Even due now, promotion finds nothing to move.
    const { rows } = await f.pool.query(`select awa.promote_due(100) as n`);
    expect(rows[0].n).toBe(0);
    expect(await claim('cretry')).toEqual([]);
  });
});
