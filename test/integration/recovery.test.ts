import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineJob, InvalidOptionError, WorkerHost, type Settlement } from '../../src/index.js';
import {
  settleAttempts,
  markStopped,
  registerInstance,
  rescueAbandoned,
  writeProgress,
  type ClaimBatch,
} from '../../src/storage/operations.js';
import { attemptProgress } from '../helpers/attempt-state.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';
import { claimBatches, settle } from '../helpers/claim.js';

describe('recovery', () => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('recovery');
  });
  afterAll(async () => {
    await f.close();
  });

  const claim = async (queue: string, instanceId: string, deadlineSeconds = 0): Promise<ClaimBatch> => {
    const [batch] = await claimBatches(f.storage, f.pool, {
      queue,
      max: 10,
      instanceId,
      agingSeconds: 60,
      deadlineSeconds,
    });
    return batch!;
  };
  const settlement = (b: ClaimBatch, i: number): Settlement => settle(b, b.jobs[i]!, 'completed');

  it('rescues the open receipts of a silent worker: attempt counted, late completion rejected', async () => {
    await registerInstance(f.pool, f.schema, 'silent', [{ queue: 'rq', dlq: false, concurrency: 1 }], 'test');
    const [a, b] = (
      await f.client.enqueueMany([
        { kind: 'k', args: { n: 1 }, options: { queue: 'rq' } },
        { kind: 'k', args: { n: 2 }, options: { queue: 'rq' } },
      ])
    ).map((r) => r.id);
    const batch = await claim('rq', 'silent');
    // The worker finishes one job, then goes silent.
    expect(await settleAttempts(f.pool, f.schema, [settlement(batch, 0)])).toEqual(new Set([a]));
    expect(await rescueAbandoned(f.pool, f.schema, { stalenessSeconds: 60, maxBatches: 10 })).toEqual([]);
    await f.pool.query(
      `update awa.runtime_instances set heartbeat_at = now() - interval '2 minutes' where instance_id = 'silent'`,
    );
    const dbNow = async () => (await f.pool.query<{ t: Date }>('select clock_timestamp() as t')).rows[0]!.t;
    const rescuedFrom = await dbNow();
    const rescued = await rescueAbandoned(f.pool, f.schema, { stalenessSeconds: 60, maxBatches: 10 });
    const rescuedBy = await dbNow();
    expect(rescued).toEqual([
      { jobId: b, runLease: 1, instanceId: 'silent', reason: 'worker_lost', outcome: 'retry' },
    ]);
    const job = await f.client.getJob(b!);
    expect(job).toMatchObject({ state: 'retryable', attempt: 1, runLease: 1 });
    // The backoff rule after attempt 1, on the database's clock: 2 s plus up to 25 % jitter.
    expect(job!.runAt!.getTime()).toBeGreaterThanOrEqual(rescuedFrom.getTime() + 2_000);
    expect(job!.runAt!.getTime()).toBeLessThanOrEqual(rescuedBy.getTime() + 2_500);
    expect(job?.meta?.errors?.[0]?.error).toContain('silent stopped heartbeating');
    // The worker comes back and reports its result: the fence turns it into a no-op.
    expect(await settleAttempts(f.pool, f.schema, [settlement(batch, 1)])).toEqual(new Set());
    expect((await f.client.getJob(b!))?.state).toBe('retryable');
    expect((await f.client.getJob(a!))?.state).toBe('completed');
  });

  const rescuedFrom = async (instanceId: string) =>
    (await rescueAbandoned(f.pool, f.schema, { stalenessSeconds: 3600, maxBatches: 10 }))
      .filter((r) => r.instanceId === instanceId)
      .sort((x, y) => Number(x.jobId) - Number(y.jobId));

  it('the backoff rule rescue and retries use is capped at 24 h, jitter included', async () => {
    // 2^attempt seconds plus up to 25 % jitter: attempt 16 (18.2 h to 22.8 h) is under the cap, attempt 17
    // (36.4 h before jitter) and everything above is held at exactly 24 h, never more.
    const { rows } = await f.pool.query<{ attempt: number; lo: number; hi: number }>(
      `select a as attempt, min(extract(epoch from awa.backoff(a)))::float8 as lo,
              max(extract(epoch from awa.backoff(a)))::float8 as hi
         from generate_series(1, 40) a, generate_series(1, 200) sample group by a order by a`,
    );
    const byAttempt = new Map(rows.map((r) => [r.attempt, r]));
    expect(byAttempt.get(1)!.lo).toBeGreaterThanOrEqual(2);
    expect(byAttempt.get(1)!.hi).toBeLessThanOrEqual(2.5);
    expect(byAttempt.get(16)!.lo).toBeGreaterThanOrEqual(65_536);
    expect(byAttempt.get(16)!.hi).toBeLessThanOrEqual(81_920);
    for (const a of [17, 20, 30, 40])
      expect(byAttempt.get(a)).toEqual({ attempt: a, lo: 86_400, hi: 86_400 });
  });

  it('rescues the open receipts of an instance marked stopped at once, without waiting for staleness', async () => {
    await registerInstance(
      f.pool,
      f.schema,
      'stopping',
      [{ queue: 'sq', dlq: false, concurrency: 1 }],
      'test',
    );
    const [a, b] = (
      await f.client.enqueueMany([
        { kind: 'k', args: { n: 1 }, options: { queue: 'sq' } },
        { kind: 'k', args: { n: 2 }, options: { queue: 'sq' } },
      ])
    ).map((r) => r.id);
    const batch = await claim('sq', 'stopping');
    expect(batch.jobs.map((j) => j.id)).toEqual([a, b]);
    // Heard from just now: a staleness window of an hour leaves it alone…
    expect(await rescuedFrom('stopping')).toEqual([]);
    // …until it says it stopped (a graceful stop with handlers that never returned).
    await markStopped(f.pool, f.schema, 'stopping');
    expect(await rescuedFrom('stopping')).toEqual([
      { jobId: a, runLease: 1, instanceId: 'stopping', reason: 'worker_lost', outcome: 'retry' },
      { jobId: b, runLease: 1, instanceId: 'stopping', reason: 'worker_lost', outcome: 'retry' },
    ]);
    for (const id of [a!, b!]) {
      const job = await f.client.getJob(id);
      expect(job).toMatchObject({ state: 'retryable', attempt: 1, runLease: 1 });
      expect(job?.meta?.errors?.map((e) => e.error)).toEqual([
        'rescued: worker stopping stopped heartbeating',
      ]);
    }
    // Nothing is rescued twice, and the stopped worker's late result is fenced out.
    expect(await rescuedFrom('stopping')).toEqual([]);
    expect(await settleAttempts(f.pool, f.schema, [settlement(batch, 0)])).toEqual(new Set());
  });

  it('rescues the open receipts of an instance that never registered', async () => {
    const id = (await f.client.enqueue('k', {}, { queue: 'gq' })).id;
    await claim('gq', 'ghost');
    expect(await rescuedFrom('ghost')).toEqual([
      { jobId: id, runLease: 1, instanceId: 'ghost', reason: 'worker_lost', outcome: 'retry' },
    ]);
    expect(await f.client.getJob(id)).toMatchObject({ state: 'retryable', attempt: 1 });
  });

  it('sends a rescued attempt with no attempts left to the DLQ of a DLQ queue', async () => {
    await registerInstance(
      f.pool,
      f.schema,
      'doomed',
      [{ queue: 'rdlq', dlq: true, concurrency: 1 }],
      'test',
    );
    const id = (await f.client.enqueue('k', { keep: 'me' }, { queue: 'rdlq', maxAttempts: 1 })).id;
    await claim('rdlq', 'doomed');
    await markStopped(f.pool, f.schema, 'doomed');
    expect(await rescuedFrom('doomed')).toEqual([
      { jobId: id, runLease: 1, instanceId: 'doomed', reason: 'worker_lost', outcome: 'failed' },
    ]);
    expect(await f.client.getJob(id)).toMatchObject({ state: 'dlq', attempt: 1, args: { keep: 'me' } });
    const held = await f.client.listDlq({ queue: 'rdlq' });
    expect(held).toEqual([
      expect.objectContaining({
        id,
        queue: 'rdlq',
        attempt: 1,
        maxAttempts: 1,
        args: { keep: 'me' },
        reason: 'rescued: worker doomed stopped heartbeating',
      }),
    ]);
    expect(held[0]!.errors).toEqual([
      expect.objectContaining({ attempt: 1, error: 'rescued: worker doomed stopped heartbeating' }),
    ]);
  });

  it('rescues attempts past their batch deadline, and fails them for good once attempts are exhausted', async () => {
    await registerInstance(f.pool, f.schema, 'alive', [{ queue: 'dq', dlq: false, concurrency: 1 }], 'test');
    const id = (await f.client.enqueue('k', {}, { queue: 'dq', maxAttempts: 1 })).id;
    await claim('dq', 'alive', 1);
    await new Promise((r) => setTimeout(r, 1_100));
    const rescued = await rescueAbandoned(f.pool, f.schema, { stalenessSeconds: 3600, maxBatches: 10 });
    expect(rescued).toEqual([
      { jobId: id, runLease: 1, instanceId: 'alive', reason: 'deadline_exceeded', outcome: 'failed' },
    ]);
    expect(await f.client.getJob(id)).toMatchObject({ state: 'failed', attempt: 1 });
  });

  it('sends exhausted failures of a DLQ queue to the DLQ; retry gives a fresh attempt counter; purge removes', async () => {
    const boom = defineJob({ kind: 'boom', queue: 'dlqq', maxAttempts: 1 });
    let runs = 0;
    const host = new WorkerHost({
      connectionString: f.url,
      queues: { dlqq: { concurrency: 5, dlq: true } },
      pollIntervalMs: 20,
      maintenance: false,
    });
    host.register(boom, (job) => {
      runs++;
      if ((job.args as { ok?: boolean }).ok !== true && job.attempt === 1 && runs < 3)
        throw new Error(`bad input ${runs}`);
    });
    const settledIds = new Set<string>();
    host.on('settled', (s) => settledIds.add(s.jobId));
    const [x, y] = (
      await f.client.enqueueMany([
        { kind: boom, args: {} },
        { kind: boom, args: {} },
      ])
    ).map((r) => r.id);
    await host.start();
    while (!settledIds.has(x!) || !settledIds.has(y!)) await new Promise((r) => setTimeout(r, 10));
    const held = await f.client.listDlq({ queue: 'dlqq' });
    expect(held.map((e) => e.id).sort()).toEqual([x, y].sort());
    expect(held[0]?.errors).toHaveLength(1);
    expect(held[0]?.reason).toMatch(/^bad input/);
    expect((await f.client.getJob(x!))?.state).toBe('dlq');
    expect(await f.client.retryDlq([x!])).toEqual([x]);
    while ((await f.client.getJob(x!))?.state !== 'completed') await new Promise((r) => setTimeout(r, 10));
    expect(await f.client.getJob(x!)).toMatchObject({ attempt: 1, runLease: 2 });
    expect(await f.client.purgeDlq({ ids: [y!] })).toBe(1);
    expect(await f.client.listDlq({ queue: 'dlqq' })).toEqual([]);
    await host.stop();
  });

  it('cancels a job wherever it is, and aborts a running handler through its signal', async () => {
    const scheduled = (await f.client.enqueue('k', {}, { queue: 'cq', delayMs: 60_000 })).id;
    const waiting = (await f.client.enqueue('other', {}, { queue: 'cq-idle' })).id;
    expect(await f.client.cancel(scheduled)).toBe('scheduled');
    expect(await f.client.cancel(waiting)).toBe('available');
    expect(await f.client.cancel(waiting)).toBeNull();
    expect((await f.client.getJob(waiting))?.state).toBe('cancelled');
    // The scheduled job is cancelled in the database too: no deferred row is left for promotion to move,
    // and neither it nor the waiting job reaches a claim.
    expect((await f.client.getJob(scheduled))?.state).toBe('cancelled');
    expect(await f.client.cancel(scheduled)).toBeNull();
    expect(
      (await f.pool.query(`select count(*)::int as n from awa.deferred_jobs where job_id = $1`, [scheduled]))
        .rows[0].n,
    ).toBe(0);
    expect(
      await claimBatches(f.storage, f.pool, {
        queue: 'cq',
        max: 10,
        instanceId: 'x',
        agingSeconds: 60,
        deadlineSeconds: 0,
      }),
    ).toEqual([]);
    expect(
      await claimBatches(f.storage, f.pool, {
        queue: 'cq-idle',
        max: 10,
        instanceId: 'x',
        agingSeconds: 60,
        deadlineSeconds: 0,
      }),
    ).toEqual([]);

    const slow = defineJob({ kind: 'slow', queue: 'cq' });
    const host = new WorkerHost({
      connectionString: f.url,
      queues: { cq: 2 },
      pollIntervalMs: 20,
      maintenance: false,
    });
    let started!: () => void;
    const isRunning = new Promise<void>((r) => (started = r));
    const aborted = new Promise<unknown>((resolve) =>
      host.register(slow, (_job, ctx) => {
        started();
        return new Promise<void>((done) =>
          ctx.signal.addEventListener('abort', () => {
            resolve(ctx.signal.reason);
            done(); // returns normally: that late "success" must be ignored
          }),
        );
      }),
    );
    const settled: string[] = [];
    host.on('settled', (s) => settled.push(s.jobId));
    await host.start();
    const running = (await f.client.enqueue(slow, {})).id;
    await isRunning;
    expect(await f.client.cancel(running, 'no longer needed')).toBe('running');
    expect(await aborted).toBeInstanceOf(Error);
    // The host gave the attempt up (its permit is free again) and never sends its late "success".
    while (host.stats.stale === 0) await new Promise((r) => setTimeout(r, 10));
    expect(host.inFlight).toBe(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(settled).not.toContain(running);
    const job = await f.client.getJob(running);
    expect(job?.state).toBe('cancelled');
    expect(job?.meta?.errors?.at(-1)?.error).toBe('no longer needed');
    await host.stop();
  });

  it('writes progress only while the attempt is open', async () => {
    const id = (await f.client.enqueue('k', {}, { queue: 'pq' })).id;
    await registerInstance(f.pool, f.schema, 'prog', [{ queue: 'pq', dlq: false, concurrency: 1 }], 'test');
    const batch = await claim('pq', 'prog');
    const w = { claimSlot: batch.claimSlot, batchId: batch.batchId, idx: 1, jobId: id, runLease: 1 };
    expect(await writeProgress(f.pool, f.schema, { ...w, progressJson: '{"pct": 10}' })).toBe(true);
    expect(await writeProgress(f.pool, f.schema, { ...w, progressJson: '{"pct": 50}' })).toBe(true);
    expect(await writeProgress(f.pool, f.schema, { ...w, runLease: 7, progressJson: '{"pct": 99}' })).toBe(
      false,
    );
    expect(await attemptProgress(f.pool, id, 1)).toEqual({ pct: 50 });
    expect(await attemptProgress(f.pool, id, 7)).toBeUndefined();
    await settleAttempts(f.pool, f.schema, [settlement(batch, 0)]);
    expect(await writeProgress(f.pool, f.schema, { ...w, progressJson: '{"pct": 100}' })).toBe(false);
    const cleaned = await f.pool.query(`select attempt_states from awa.cleanup(3600, 3600, 3600, 100)`);
    expect(cleaned.rows[0].attempt_states).toBe('1');
  });

  it('keeps failed history through ring prune until its retention passes', async () => {
    const id = (await f.client.enqueue('k', {}, { queue: 'hist', maxAttempts: 1 })).id;
    const batch = await claim('hist', 'prog');
    await settleAttempts(f.pool, f.schema, [
      { ...settlement(batch, 0), outcome: 'failed', error: { error: 'x' } },
    ]);
    // Rotate the whole ring round and prune everything prunable.
    for (let i = 0; i < 40; i++) {
      await f.client.enqueue('filler', {}, { queue: 'fill' });
      await claimBatches(f.storage, f.pool, {
        queue: 'fill',
        max: 100,
        instanceId: 'prog',
        agingSeconds: 60,
        deadlineSeconds: 0,
      }).then((bs) =>
        settleAttempts(
          f.pool,
          f.schema,
          bs.flatMap((b) => b.jobs.map((_, i2) => settlement(b, i2))),
        ),
      );
      await f.pool.query('select awa.rotate()');
      await f.pool.query('select awa.prune(50, 0, 16)');
    }
    // The slot that held the job's body has really been truncated…
    const body = await f.pool.query(`select count(*)::int as n from awa.ready_entries where job_id = $1`, [
      id,
    ]);
    expect(body.rows[0].n).toBe(0);
    // …and the failure is still on record.
    expect(await f.client.getJob(id)).toMatchObject({ state: 'failed', args: {}, attempt: 1 });
    await f.pool.query('select * from awa.cleanup(3600, 3600, 3600, 100)');
    expect((await f.client.getJob(id))?.state).toBe('failed');
    await f.pool.query('select * from awa.cleanup(0, 3600, 3600, 100)');
    expect(await f.client.getJob(id)).toBeNull();
  });

  it('enforces a kind deadline locally: signal aborted, attempt retried, the queue keeps flowing', async () => {
    const hang = defineJob({ kind: 'hang', queue: 'hq', deadlineMs: 100, maxAttempts: 2 });
    const quick = defineJob({ kind: 'quick', queue: 'hq' });
    const host = new WorkerHost({
      connectionString: f.url,
      queues: { hq: 4 },
      pollIntervalMs: 20,
      promoteIntervalMs: 20,
      leaderElectionIntervalMs: 20,
    });
    const reasons: string[] = [];
    host.register(
      hang,
      (_job, ctx) =>
        new Promise(() =>
          ctx.signal.addEventListener('abort', () => reasons.push(String(ctx.signal.reason))),
        ),
    );
    host.register(quick, () => {});
    const outcomes = new Map<string, string[]>();
    host.on('settled', (s, ok) => ok && outcomes.set(s.jobId, [...(outcomes.get(s.jobId) ?? []), s.outcome]));
    await host.start();
    const hung = (await f.client.enqueue(hang, {})).id;
    const ok = (await f.client.enqueue(quick, {})).id;
    while ((outcomes.get(hung)?.length ?? 0) < 2 || !outcomes.has(ok))
      await new Promise((r) => setTimeout(r, 10));
    await host.stop();
    expect(outcomes.get(hung)).toEqual(['retry', 'failed']);
    expect(outcomes.get(ok)).toEqual(['completed']);
    expect(reasons).toHaveLength(2);
    expect(reasons[0]).toContain('exceeded its 100 ms deadline');
    expect((await f.client.getJob(hung))?.meta?.errors?.map((e) => e.attempt)).toEqual([1, 2]);
  });

  it('rejects a staleness window shorter than three heartbeats, naming the field', () => {
    const err = (() => {
      try {
        new WorkerHost({ connectionString: f.url, heartbeatIntervalMs: 1000, heartbeatStalenessMs: 2000 });
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(InvalidOptionError);
    expect((err as InvalidOptionError).field).toBe('heartbeatStalenessMs');
  });
});
