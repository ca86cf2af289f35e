import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finishAttempts, type ClaimBatch, type ClaimedJob } from '../../src/storage/index.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';
import { claimBatches, settle } from '../helpers/claim.js';

describe('finish (the fenced settle path)', () => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('finish');
  });
  afterAll(async () => {
    await f.close();
  });

  /** One claim batch of `queue` (up to `max` jobs) and its first job. */
  const claimOne = async (queue: string, max = 1): Promise<{ batch: ClaimBatch; job: ClaimedJob }> => {
    const [batch] = await claimBatches(f.pool, f.schema, {
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
    expect(await finishAttempts(f.pool, f.schema, [settle(batch, job, 'completed')])).toEqual(new Set([id]));
    expect(await finishAttempts(f.pool, f.schema, [settle(batch, job, 'failed')])).toEqual(new Set());
    expect((await f.client.getJob(id))?.state).toBe('completed');
  });

  it('a batch settled over several flushes: a later flush repeating closed members settles only the open ones', async () => {
    const jobs = Array.from({ length: 6 }, () => ({ kind: 'k', args: {}, options: { queue: 'pieces' } }));
    const ids = (await f.client.enqueueMany(jobs)).map((j) => j.id);
    const { batch } = await claimOne('pieces', 6);
    expect(batch.jobs.map((j) => j.id)).toEqual(ids);
    const member = (i: number) => settle(batch, batch.jobs[i]!, 'completed');
    // Three closures of one batch (two completed, one settled), then one flush naming all six members.
    expect(await finishAttempts(f.pool, f.schema, [member(0), member(1)])).toEqual(new Set([ids[0], ids[1]]));
    expect(await finishAttempts(f.pool, f.schema, [member(3)])).toEqual(new Set([ids[3]]));
    expect(await finishAttempts(f.pool, f.schema, [settle(batch, batch.jobs[5]!, 'cancelled')])).toEqual(
      new Set([ids[5]]),
    );
    const again = await finishAttempts(f.pool, f.schema, [0, 1, 2, 3, 4, 5].map(member));
    expect(again).toEqual(new Set([ids[2], ids[4]]));
    const states = await Promise.all(ids.map(async (id) => (await f.client.getJob(id))?.state));
    expect(states).toEqual(['completed', 'completed', 'completed', 'completed', 'completed', 'cancelled']);
  });
  it('rejects a completion carrying a stale run lease (the fence)', async () => {
    const id = (await f.client.enqueue('k', {}, { queue: 'fence' })).id;
    const first = await claimOne('fence');
    // Attempt 1 is retried immediately and claimed again as attempt 2 (run lease 2).
    await finishAttempts(f.pool, f.schema, [
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
    expect(await finishAttempts(f.pool, f.schema, [late])).toEqual(new Set());
    expect((await f.client.getJob(id))?.state).toBe('running');
    expect(await finishAttempts(f.pool, f.schema, [settle(second.batch, second.job, 'completed')])).toEqual(
      new Set([id]),
    );
    expect((await f.client.getJob(id))?.state).toBe('completed');
  });

  it('retry counts the attempt and records the error; snooze does not count it', async () => {
    const retried = (await f.client.enqueue('k', { r: 1 }, { queue: 'outcomes' })).id;
    const snoozed = (await f.client.enqueue('k', { s: 1 }, { queue: 'outcomes' })).id;
    const [batch] = await claimBatches(f.pool, f.schema, {
      queue: 'outcomes',
      max: 2,
      instanceId: 't',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    const [a, b] = batch!.jobs;
    const later = new Date(Date.now() + 60_000);
    const accepted = await finishAttempts(f.pool, f.schema, [
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
    const [batch] = await claimBatches(f.pool, f.schema, {
      queue: 'terminal',
      max: 2,
      instanceId: 't',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    await finishAttempts(f.pool, f.schema, [
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
      await claimBatches(f.pool, f.schema, {
        queue: 'mixed',
        max: 3,
        instanceId: 't',
        agingSeconds: 60,
        deadlineSeconds: 0,
      })
    )[0]!;
    const b2 = (
      await claimBatches(f.pool, f.schema, {
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
    expect(await finishAttempts(f.pool, f.schema, [...items, bogus])).toEqual(new Set(ids));
    expect((await f.client.counts()).find((c) => c.queue === 'mixed')).toMatchObject({
      completed: 6,
      running: 0,
    });
  });
});
