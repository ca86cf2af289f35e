import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClaimBatch, ClaimedJob, ClaimRequest, Settlement } from '../../src/storage/operations.js';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { settle } from '../helpers/claim.js';
import { STORAGE_VARIANTS } from './variants.js';

// The settler's promise (docs/storage-contract.md): settleAttempts() accepts an attempt only with the run lease
// it is running at now, routes every outcome once, and tells which it accepted. Through the contract, once per
// storage variant.

describe.each(STORAGE_VARIANTS)('settleAttempts ($name storage): the fenced settle path', (variant) => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('settle', variant);
  });
  const settleAttempts = (items: readonly Settlement[]) => f.storage.settler.settleAttempts(f.pool, items);
  const claimBatches = async (req: ClaimRequest) => (await f.storage.claimer.claim(f.pool, req)).batches;
  afterAll(async () => {
    await f.close();
  });

  /** One claim batch of `queue` (up to `max` jobs) and its first job. */
  const claimOne = async (queue: string, max = 1): Promise<{ batch: ClaimBatch; job: ClaimedJob }> => {
    const [batch] = await claimBatches({
      queue,
      max,
      instanceId: 't',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    return { batch: batch!, job: batch!.jobs[0]! };
  };

  it('completes once; a second completion of the same attempt is a no-op', async () => {
    const id = (await f.client.enqueue('k', {}, { queue: 'once' })).id;
    const { batch, job } = await claimOne('once');
    expect((await f.client.getJob(id))?.state).toBe('running');
    expect(await settleAttempts([settle(batch, job, 'completed')])).toEqual(new Set([id]));
    expect(await settleAttempts([settle(batch, job, 'failed')])).toEqual(new Set());
    expect((await f.client.getJob(id))?.state).toBe('completed');
  });

  it('a batch settled over several flushes: a later flush repeating closed members settles only the open ones', async () => {
    const jobs = Array.from({ length: 6 }, () => ({ kind: 'k', args: {}, options: { queue: 'pieces' } }));
    const ids = (await f.client.enqueueMany(jobs)).map((j) => j.id);
    const { batch } = await claimOne('pieces', 6);
    expect(batch.jobs.map((j) => j.id)).toEqual(ids);
    const member = (i: number) => settle(batch, batch.jobs[i]!, 'completed');
    // Three closures of one batch (two completed, one settled), then one flush naming all six members.
    expect(await settleAttempts([member(0), member(1)])).toEqual(new Set([ids[0], ids[1]]));
    expect(await settleAttempts([member(3)])).toEqual(new Set([ids[3]]));
    expect(await settleAttempts([settle(batch, batch.jobs[5]!, 'cancelled')])).toEqual(new Set([ids[5]]));
    const again = await settleAttempts([0, 1, 2, 3, 4, 5].map(member));
    expect(again).toEqual(new Set([ids[2], ids[4]]));
    const states = await Promise.all(ids.map(async (id) => (await f.client.getJob(id))?.state));
    expect(states).toEqual(['completed', 'completed', 'completed', 'completed', 'completed', 'cancelled']);
  });
  it('plain completions of a receipt whose members carry different run leases are each checked against their own', async () => {
    const first = (await f.client.enqueue('k', {}, { queue: 'mixed_lease' })).id;
    const a = await claimOne('mixed_lease');
    await settleAttempts([
      settle(a.batch, a.job, 'retry', { runAt: new Date(Date.now() - 1000), error: { error: 'again' } }),
    ]);
    await f.pool.query('select awa.promote_due(100)');
    const second = (await f.client.enqueue('k', {}, { queue: 'mixed_lease' })).id;
    const { batch } = await claimOne('mixed_lease', 10);
    // One receipt, two leases: the retried job's second attempt and the fresh job's first.
    expect(batch.jobs.map((j) => [j.id, j.runLease])).toEqual([
      [first, 2],
      [second, 1],
    ]);
    // The first job's stale writer (lease 1) travels in the same group as the second job's completion.
    const stale = settle(batch, batch.jobs[0]!, 'completed', { runLease: 1 });
    expect(await settleAttempts([stale, settle(batch, batch.jobs[1]!, 'completed')])).toEqual(
      new Set([second]),
    );
    expect((await f.client.getJob(first))?.state).toBe('running');
    expect(await settleAttempts([settle(batch, batch.jobs[0]!, 'completed')])).toEqual(new Set([first]));
    expect((await f.client.getJob(first))?.state).toBe('completed');
    expect((await f.client.getJob(second))?.state).toBe('completed');
  });

  it('one flush of plain completions and other outcomes of the same receipt settles each exactly once', async () => {
    const ids = (
      await f.client.enqueueMany(
        Array.from({ length: 5 }, () => ({ kind: 'k', args: {}, options: { queue: 'mixflush' } })),
      )
    ).map((j) => j.id);
    const { batch } = await claimOne('mixflush', 5);
    const [j0, j1, j2, j3, j4] = batch.jobs as [ClaimedJob, ClaimedJob, ClaimedJob, ClaimedJob, ClaimedJob];
    const accepted = await settleAttempts([
      settle(batch, j0, 'completed'),
      settle(batch, j1, 'failed', { error: { error: 'no' } }),
      settle(batch, j2, 'completed'),
      // A completion that carries an error record goes row by row; the duplicate of j0 changes nothing.
      settle(batch, j3, 'completed', { error: { note: 'x' } }),
      settle(batch, j0, 'completed'),
    ]);
    expect(accepted).toEqual(new Set([ids[0], ids[1], ids[2], ids[3]]));
    const { rows } = await f.pool.query<{ n: number; outcome: string }>(
      `select n, outcome from awa.closure_batches where batch_id = $1 order by outcome, n`,
      [batch.batchId],
    );
    // Closed once each: the plain completions as one range, the row-by-row ones by their outcome.
    expect(rows.reduce((t, r) => t + r.n, 0)).toBe(4);
    expect(await settleAttempts([settle(batch, j4, 'completed'), settle(batch, j2, 'completed')])).toEqual(
      new Set([ids[4]]),
    );
    const states = await Promise.all(ids.map(async (id) => (await f.client.getJob(id))?.state));
    expect(states).toEqual(['completed', 'failed', 'completed', 'completed', 'completed']);
  });

  it('rejects a completion carrying a stale run lease (the fence)', async () => {
    const id = (await f.client.enqueue('k', {}, { queue: 'fence' })).id;
    const first = await claimOne('fence');
    // Attempt 1 is retried immediately and claimed again as attempt 2 (run lease 2).
    await settleAttempts([
      settle(first.batch, first.job, 'retry', {
        runAt: new Date(Date.now() - 1000),
        error: { error: 'boom' },
      }),
    ]);
    await f.pool.query('select awa.promote_due(100)');
    const second = await claimOne('fence');
    expect(second.job).toMatchObject({ id, attempt: 2, runLease: 2 });
    // The first attempt's late completion (lease 1) must not touch the second attempt.
    const late = settle(second.batch, second.job, 'completed', { runLease: 1 });
    expect(await settleAttempts([late])).toEqual(new Set());
    expect((await f.client.getJob(id))?.state).toBe('running');
    expect(await settleAttempts([settle(second.batch, second.job, 'completed')])).toEqual(new Set([id]));
    expect((await f.client.getJob(id))?.state).toBe('completed');
  });

  it('retry counts the attempt and records the error; snooze does not count it', async () => {
    const retried = (await f.client.enqueue('k', { r: 1 }, { queue: 'outcomes' })).id;
    const snoozed = (await f.client.enqueue('k', { s: 1 }, { queue: 'outcomes' })).id;
    const [batch] = await claimBatches({
      queue: 'outcomes',
      max: 2,
      instanceId: 't',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    const [a, b] = batch!.jobs;
    const later = new Date(Date.now() + 60_000);
    const accepted = await settleAttempts([
      settle(batch!, a!, 'retry', { runAt: later, error: { attempt: 1, error: 'transient' } }),
      settle(batch!, b!, 'snooze', { runAt: later }),
    ]);
    expect(accepted).toEqual(new Set([retried, snoozed]));
    const r = await f.client.getJob(retried);
    const s = await f.client.getJob(snoozed);
    expect(r).toMatchObject({ state: 'retryable', attempt: 1, runLease: 1 });
    expect(r?.meta?.errors).toEqual([{ attempt: 1, error: 'transient' }]);
    expect(s).toMatchObject({ state: 'scheduled', attempt: 0, runLease: 1 });
    expect(r?.runAt?.getTime()).toBe(later.getTime());
  });

  it('failed and cancelled go to the wide terminal rows with their history', async () => {
    const failed = (await f.client.enqueue('k', { f: 1 }, { queue: 'terminal' })).id;
    const cancelled = (await f.client.enqueue('k', { c: 1 }, { queue: 'terminal' })).id;
    const [batch] = await claimBatches({
      queue: 'terminal',
      max: 2,
      instanceId: 't',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    await settleAttempts([
      settle(batch!, batch!.jobs[0]!, 'failed', { error: { attempt: 1, error: 'fatal' } }),
      settle(batch!, batch!.jobs[1]!, 'cancelled', { error: { attempt: 1, error: 'stop' } }),
    ]);
    expect(await f.client.getJob(failed)).toMatchObject({ state: 'failed', attempt: 1, args: { f: 1 } });
    expect(await f.client.getJob(cancelled)).toMatchObject({ state: 'cancelled', attempt: 1 });
    const counts = (await f.client.counts()).find((c) => c.queue === 'terminal');
    expect(counts).toMatchObject({ failed: 1, cancelled: 1, running: 0 });
  });

  it('settles a mixed flush across batches in one call and ignores unknown receipts', async () => {
    const ids = (
      await f.client.enqueueMany(
        Array.from({ length: 6 }, (_, i) => ({ kind: 'm', args: { i }, options: { queue: 'mixed' } })),
      )
    ).map((r) => r.id);
    const b1 = (
      await claimBatches({
        queue: 'mixed',
        max: 3,
        instanceId: 't',
        agingSeconds: 60,
        deadlineSeconds: 0,
      })
    )[0]!;
    const b2 = (
      await claimBatches({
        queue: 'mixed',
        max: 3,
        instanceId: 't',
        agingSeconds: 60,
        deadlineSeconds: 0,
      })
    )[0]!;
    const items = [
      ...b1.jobs.map((j) => settle(b1, j, 'completed')),
      ...b2.jobs.map((j) => settle(b2, j, 'completed')),
    ];
    const bogus = { ...items[0]!, batchId: '999999999', jobId: '424242' };
    expect(await settleAttempts([...items, bogus])).toEqual(new Set(ids));
    expect((await f.client.counts()).find((c) => c.queue === 'mixed')).toMatchObject({
      completed: 6,
      running: 0,
    });
  });
});
