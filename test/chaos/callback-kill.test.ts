// Chaos: a host is SIGKILLed while a handler waits inside its attempt for an external callback
// (ctx.waitForCallback). Another host rescues the attempt once the dead one's heartbeat is stale; the token
// of the dead attempt is then worthless (rejected, and nothing in the database moves), and the job completes
// in a new attempt, once, with the token that attempt registered.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import type { AwaClient } from '../../src/index.js';
import { chaosAwaitCallback, type ChaosLine } from '../fixtures/chaos-jobs.js';
import { ChaosWorker, closeScene, openScene, waitFor, workerConfig, type Scene } from './harness.js';

type WaitingLine = Extract<ChaosLine, { event: 'waiting' }>;

/** The heartbeat staleness of the chaos workers' short timings (test/fixtures/chaos-worker.ts). */
const STALENESS_MS = 1_500;
const HEARTBEAT_MS = 200;

describe('chaos: a host dies while a handler waits for its callback', () => {
  let scene: Scene | undefined;
  let client: AwaClient;
  let pool: pg.Pool;
  const workers: ChaosWorker[] = [];

  beforeAll(async () => {
    scene = await openScene('cbkill');
    ({ client, pool } = scene);
  });
  afterAll(async () => {
    await closeScene(scene, workers);
  });

  /** Every attempt of job `id` as its receipts and closures record it: run lease, holder, how it was closed. */
  const attempts = async (id: string) =>
    (
      await pool.query<{ run_lease: string; instance_id: string; outcome: string | null }>(
        `select m.run_lease::text, b.instance_id, c.outcome
           from awa.claim_batches b
           cross join lateral awa.receipt_members(b.slot, b.batch_id) m
           join awa.ready_entries r
             on r.slot = m.ready_slot and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq
            and r.run_lease + 1 = m.run_lease
           left join awa.closure_batches c
             on c.slot = b.slot and c.batch_id = b.batch_id and c.idxs @> m.idx
          where r.job_id = $1
          order by m.run_lease, c.outcome`,
        [id],
      )
    ).rows.map((r) => ({ runLease: Number(r.run_lease), instance: r.instance_id, outcome: r.outcome }));

  /** Everything the database holds about job `id` that a callback could change. (The leader's cleanup
   * deletes the attempt state of ended attempts whenever it runs, so the dead attempt's row is not part of
   * it; that no callback was ever recorded on it is.) */
  const snapshot = async (id: string) => ({
    job: await client.getJob(id),
    attempts: await attempts(id),
    // Callbacks recorded on any attempt of the job.
    delivered: (
      await pool.query(
        `select run_lease, callback_token::text, callback_result from awa.attempt_state
          where job_id = $1 and (callback_result is not null or callback_at is not null) order by run_lease`,
        [id],
      )
    ).rows,
    // The state of the attempts after the dead one.
    live: (
      await pool.query(
        `select run_lease, callback_token::text, callback_timeout_at, callback_result, callback_at, updated_at
           from awa.attempt_state where job_id = $1 and run_lease > 1 order by run_lease`,
        [id],
      )
    ).rows,
    deferred: (await pool.query(`select * from awa.deferred_jobs where job_id = $1`, [id])).rows,
    waiting: (await pool.query(`select * from awa.waiting_jobs where job_id = $1`, [id])).rows,
    done: (await pool.query(`select * from awa.done_entries where job_id = $1`, [id])).rows,
  });
  const tokenRows = async (id: string) =>
    (
      await pool.query(
        `select run_lease, callback_token::text, callback_result from awa.attempt_state
          where job_id = $1 order by run_lease`,
        [id],
      )
    ).rows;

  const waitingLine = (w: ChaosWorker, id: string, attempt: number) =>
    w.lines().find((l): l is WaitingLine => l.event === 'waiting' && l.id === id && l.attempt === attempt);

  it('SIGKILL during ctx.waitForCallback: rescued after the heartbeat deadline, the old token is rejected and changes nothing, the job completes once in a new attempt', async () => {
    const { dir } = scene!.logs;
    // The ring does not rotate during the run, so every receipt and closure of the job stays readable.
    const quietRing = { ringIntervalMs: 3_600_000, queues: { cbwait: { concurrency: 2 } } };
    // The first host takes no part in leadership: the rescue comes from the second one.
    const first = await ChaosWorker.spawn(
      dir,
      workerConfig(scene!.db.url, 'cb-first', { ...quietRing, maintenance: false }),
    );
    workers.push(first);
    const { id } = await client.enqueue(chaosAwaitCallback, { uid: 'cb-kill-1' });

    await waitFor(
      'the first attempt to wait for its callback',
      () => waitingLine(first, id, 1) !== undefined,
      20_000,
    );
    const oldToken = waitingLine(first, id, 1)!.token;
    // The database agrees: attempt 1 runs, holds this token, and nothing was delivered to it.
    const before = await snapshot(id);
    expect(before.job).toMatchObject({ state: 'running', attempt: 1, runLease: 1 });
    expect(await tokenRows(id)).toEqual([
      { run_lease: '1', callback_token: oldToken, callback_result: null },
    ]);
    expect(before.delivered).toEqual([]);
    expect(before.attempts).toEqual([{ runLease: 1, instance: 'cb-first', outcome: null }]);

    const killedAt = await first.kill();
    const second = await ChaosWorker.spawn(dir, workerConfig(scene!.db.url, 'cb-second', quietRing));
    workers.push(second);

    // Rescue: the dead host's receipt is closed as a failed attempt (retry), by the second host, once the
    // dead host's heartbeat is older than the staleness window.
    await waitFor(
      'the first attempt to be rescued',
      async () => (await attempts(id)).some((a) => a.runLease === 1 && a.outcome !== null),
      20_000,
    );
    const rescueLine = () =>
      second
        .lines()
        .filter((l): l is Extract<ChaosLine, { event: 'rescue' }> => l.event === 'rescue')
        .find((l) => l.rescued.some((r) => r.jobId === id));
    // The host writes its log line once the rescue has committed, so the database can show it first.
    await waitFor('the second host to log the rescue', () => rescueLine() !== undefined, 10_000);
    const rescue = rescueLine();
    expect(rescue?.rescued.filter((r) => r.jobId === id)).toEqual([
      { jobId: id, runLease: 1, instanceId: 'cb-first', reason: 'worker_lost', outcome: 'retry' },
    ]);
    expect(rescue!.t - killedAt).toBeGreaterThanOrEqual(STALENESS_MS - HEARTBEAT_MS);
    expect((await attempts(id)).find((a) => a.runLease === 1)).toEqual({
      runLease: 1,
      instance: 'cb-first',
      outcome: 'settled', // a closure that is not a completion (here: the retry the rescue asked for)
    });
    expect((await client.getJob(id))?.meta?.errors).toMatchObject([
      { attempt: 1, error: 'rescued: worker cb-first stopped heartbeating', name: 'Rescued' },
    ]);

    // The dead attempt's token, delivered after the rescue: rejected, and nothing changes.
    const afterRescue = await snapshot(id);
    expect(await client.completeExternal(oldToken, { from: 'the old attempt' })).toEqual({
      outcome: 'rejected',
      jobId: null,
    });
    expect(await snapshot(id)).toEqual(afterRescue);

    // The retry runs on the second host as attempt 2, which registers a token of its own.
    await waitFor(
      'the second attempt to wait for its callback',
      () => waitingLine(second, id, 2) !== undefined,
      20_000,
    );
    const newToken = waitingLine(second, id, 2)!.token;
    expect(newToken).not.toBe(oldToken);
    const waiting2 = await snapshot(id);
    expect(waiting2.job).toMatchObject({ state: 'running', attempt: 2, runLease: 2 });
    // Every way of delivering the old token is refused while attempt 2 waits; attempt 2 sees none of them.
    expect(await client.completeExternal(oldToken, { from: 'the old attempt' })).toEqual({
      outcome: 'rejected',
      jobId: null,
    });
    expect(await client.resumeExternal(oldToken, { from: 'the old attempt' })).toEqual({
      outcome: 'rejected',
      jobId: null,
    });
    expect(await client.failExternal(oldToken, 'from the old attempt')).toEqual({
      outcome: 'rejected',
      jobId: null,
    });
    expect(await snapshot(id)).toEqual(waiting2);

    // The new token completes the job through the waiting handler.
    expect(await client.completeExternal(newToken, { from: 'the new attempt' })).toEqual({
      outcome: 'delivered',
      jobId: id,
    });
    await waitFor(
      'the job to complete',
      async () => (await client.getJob(id))?.state === 'completed',
      20_000,
    );
    expect(await second.stop()).toBe(0);

    // Exactly once, in the database: two attempts, the first closed by the rescue, the second completed; no
    // third attempt, nothing in the backlog, the parked table or the terminal rows.
    const end = await snapshot(id);
    expect(end.job).toMatchObject({ state: 'completed', attempt: 2, runLease: 2 });
    expect(end.attempts).toEqual([
      { runLease: 1, instance: 'cb-first', outcome: 'settled' },
      { runLease: 2, instance: 'cb-second', outcome: 'completed' },
    ]);
    expect(end.deferred).toEqual([]);
    expect(end.waiting).toEqual([]);
    expect(end.done).toEqual([]);
    // One callback was ever recorded for the job: the new token's, on attempt 2.
    expect(end.delivered).toMatchObject([
      {
        run_lease: '2',
        callback_token: newToken,
        callback_result: { action: 'complete', payload: { from: 'the new attempt' } },
      },
    ]);
    // And in the handlers' own logs: attempt 1 never ended, attempt 2 ended once with the new payload.
    const ends = [...first.lines(), ...second.lines()].filter((l) => l.event === 'end' && l.id === id);
    expect(ends).toMatchObject([
      { attempt: 2, runLease: 2, instance: 'cb-second', payload: { from: 'the new attempt' } },
    ]);
  }, 60_000);
});
