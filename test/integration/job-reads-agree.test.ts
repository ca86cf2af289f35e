import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobState } from '../../src/index.js';
import type { ClaimBatch, Outcome, Settlement } from '../../src/storage/operations.js';
import { claimBatches, settle } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Operator truth: one job read four ways (a flow's blocked job too) (getJob, a page of its state, the jobs view, its queue's counts) must say the same
// thing in every state. Each read used to restate which table holds which state, and their attempt counts
// disagreed: a job never run read attempt 0 from getJob and 1 from the page of available jobs. Both now say
// attempts started so far, and the states off the ring are read through one view (off_ring_jobs).

const QUEUE = 'agree';
const DLQ_QUEUE = 'agree_dlq';
const LATER = new Date(Date.now() + 3_600_000);

describe('a job reads the same through getJob, its state page and its queue counts', () => {
  let f: StorageFixture;
  /** job id -> the state it was put in, and the attempts it started. */
  const expected = new Map<string, { state: JobState; attempt: number; queue: string }>();

  const claimOne = async (queue: string): Promise<ClaimBatch> => {
    const [batch] = await claimBatches(f.storage, f.pool, {
      queue,
      max: 1,
      instanceId: 'agree',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    expect(batch?.jobs).toHaveLength(1);
    return batch!;
  };
  const settleOne = async (b: ClaimBatch, outcome: Outcome, extra: Partial<Settlement> = {}) => {
    const accepted = await f.storage.settler.settleAttempts(f.pool, [settle(b, b.jobs[0]!, outcome, extra)]);
    expect(accepted.size).toBe(1);
  };
  /** Enqueues one job, claims it (the only available job of its queue at that moment) and leaves it running. */
  const running = async (queue = QUEUE): Promise<ClaimBatch> => {
    const { id } = await f.client.enqueue('agree', {}, { queue });
    const b = await claimOne(queue);
    expect(b.jobs[0]!.id).toBe(id);
    return b;
  };

  beforeAll(async () => {
    f = await storageFixture('reads_agree');
    await f.pool.query(`insert into awa.queue_settings (queue, dlq_enabled) values ($1, true)`, [DLQ_QUEUE]);
    const put = (id: string, state: JobState, attempt: number, queue = QUEUE) =>
      expected.set(id, { state, attempt, queue });

    const r = await running();
    put(r.jobs[0]!.id, 'running', 1);
    const done = await running();
    await settleOne(done, 'completed');
    put(done.jobs[0]!.id, 'completed', 1);
    const failed = await running();
    await settleOne(failed, 'failed', { error: { error: 'boom' } });
    put(failed.jobs[0]!.id, 'failed', 1);
    const retry = await running();
    await settleOne(retry, 'retry', { runAt: LATER, error: { error: 'again' } });
    put(retry.jobs[0]!.id, 'retryable', 1);
    const snoozed = await running();
    await settleOne(snoozed, 'snooze', { runAt: LATER });
    put(snoozed.jobs[0]!.id, 'scheduled', 0);
    const parked = await running();
    const member = parked.jobs[0]!;
    const token = await f.storage.settler.registerCallback(
      f.pool,
      {
        claimSlot: parked.claimSlot,
        batchId: parked.batchId,
        idx: member.idx,
        jobId: member.id,
        runLease: member.runLease,
      },
      60_000,
    );
    expect(token).not.toBeNull();
    await settleOne(parked, 'wait');
    put(parked.jobs[0]!.id, 'waiting_external', 1);
    const dead = await running(DLQ_QUEUE);
    await settleOne(dead, 'failed', { error: { error: 'dead' } });
    put(dead.jobs[0]!.id, 'dlq', 1, DLQ_QUEUE);

    const cancelled = await f.client.enqueue('agree', {}, { queue: QUEUE });
    expect(await f.client.cancel(cancelled.id)).toBeTruthy();
    put(cancelled.id, 'cancelled', 0);
    put((await f.client.enqueue('agree', {}, { queue: QUEUE, runAt: LATER })).id, 'scheduled', 0);
    put((await f.client.enqueue('agree', {}, { queue: QUEUE })).id, 'available', 0);
    // A flow's dependent waits, blocked, behind its root.
    const flow = await f.client.enqueueFlow({
      jobs: [
        { name: 'root', kind: 'agree', args: {}, options: { queue: QUEUE } },
        { name: 'after', kind: 'agree', args: {}, options: { queue: QUEUE }, dependsOn: ['root'] },
      ],
    });
    put(flow.jobs.root!, 'available', 0);
    put(flow.jobs.after!, 'blocked', 0);
  });
  afterAll(async () => {
    await f.close();
  });

  it('getJob says the state and attempts each job was put in', async () => {
    for (const [id, want] of expected) {
      const job = await f.client.getJob(id);
      expect({ id, state: job?.state, attempt: job?.attempt }).toEqual({
        id,
        state: want.state,
        attempt: want.attempt,
      });
    }
  });

  it("the page of each job's state lists it with the same attempts", async () => {
    for (const [id, want] of expected) {
      const page = await f.client.listJobs({ state: want.state, queue: want.queue });
      const row = page.find((j) => j.id === id);
      expect({ id, state: row?.state, attempt: row?.attempt }).toEqual({
        id,
        state: want.state,
        attempt: want.attempt,
      });
    }
  });

  it('the jobs view has one row per job, with the same state and attempts', async () => {
    const { rows } = await f.pool.query<{ id: string; state: string; attempt: number; n: string }>(
      `select j.id::text as id, j.state, j.attempt, count(*) over (partition by j.id) as n from awa.jobs j
        where j.queue = any($1) order by j.id`,
      [[QUEUE, DLQ_QUEUE]],
    );
    expect(rows.map((r) => ({ id: r.id, state: r.state, attempt: r.attempt, n: Number(r.n) }))).toEqual(
      [...expected].map(([id, e]) => ({ id, state: e.state, attempt: e.attempt, n: 1 })),
    );
  });

  it('each queue counts per state exactly the jobs put in that state', async () => {
    const counts = await f.client.counts();
    for (const queue of [QUEUE, DLQ_QUEUE]) {
      const row = counts.find((c) => c.queue === queue);
      const want = (state: JobState) =>
        [...expected.values()].filter((e) => e.queue === queue && e.state === state).length;
      expect(row).toMatchObject({
        available: want('available'),
        running: want('running'),
        waiting: want('waiting_external'),
        scheduled: want('scheduled'),
        retryable: want('retryable'),
        completed: want('completed'),
        failed: want('failed'),
        cancelled: want('cancelled'),
        dlq: want('dlq'),
        blocked: want('blocked'),
      });
    }
  });
});
