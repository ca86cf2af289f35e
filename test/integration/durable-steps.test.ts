import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaError,
  defineJob,
  MAX_STEPS_PER_JOB,
  RetryAfter,
  WorkerHost,
  type Job,
  type JobContext,
  type WorkerOptions,
} from '../../src/index.js';
import {
  cleanupHistory,
  promoteDue,
  pruneSteps,
  recordedSteps,
  recordStep,
  recordSteps,
  registerInstance,
  rescueAbandoned,
  settleAttempts,
  type AttemptRef,
  type ClaimBatch,
  type Outcome,
  type Settlement,
} from '../../src/storage/operations.js';
import { ChaosWorker, logDir } from '../chaos/harness.js';
import { poolStep } from '../fixtures/pool-handlers.js';
import { stepsKillJob } from '../fixtures/steps-jobs.js';
import { claimBatches, settle } from '../helpers/claim.js';
import { QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Durable steps (ctx.step, ctx.sleep) against a real database: replay after a retry and after a SIGKILLed
// host, the fence on a stale attempt, two recorders racing on one name, sleep without a permit, the typed
// errors, and the cleanup that prunes the steps of jobs that are gone.

const STEPS_WORKER = new URL('../fixtures/steps-worker.ts', import.meta.url).pathname;
const POOL_HANDLERS = new URL('../fixtures/pool-handlers.ts', import.meta.url).pathname;

let f: StorageFixture;
const hosts: WorkerHost[] = [];
const logs = logDir('steps');
const workers: ChaosWorker[] = [];

beforeAll(async () => {
  f = await storageFixture('steps');
});
afterEach(async () => {
  await stopHosts(hosts);
  await Promise.all(workers.splice(0).map((w) => w.kill()));
});
afterAll(async () => {
  await f?.close();
  logs.remove();
});

async function host(
  queue: string,
  concurrency: number,
  register: (h: WorkerHost) => void,
  extra: Partial<WorkerOptions> = {},
): Promise<WorkerHost> {
  const h = new WorkerHost({
    connectionString: f.url,
    queues: { [queue]: concurrency },
    ...QUICK_HOST,
    ...extra,
  });
  h.on('error', () => {});
  register(h);
  await h.start();
  hosts.push(h);
  return h;
}

const stateOf = async (id: string) => (await f.client.getJob(id))?.state;
const stepNames = async (id: string) => (await recordedSteps(f.pool, f.schema, id)).map((s) => s.name);

describe('ctx.step', () => {
  it('a retry re-runs only the steps that had not recorded: three steps, a throw after the second', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'steps_retry', queue: 'steps_retry', maxAttempts: 3 });
    const runs = { a: 0, b: 0, c: 0, u: 0, z: 0 };
    const seen: unknown[] = [];
    await host('steps_retry', 1, (h) =>
      h.register(kind, async (job, ctx) => {
        const a = await ctx.step('a', () => ++runs.a);
        const b = await ctx.step('b', async () => {
          runs.b++;
          return { sum: a + job.args.n, when: new Date(0) };
        });
        const u = await ctx.step('u', () => void runs.u++);
        const z = await ctx.step('z', () => (runs.z++, null));
        seen.push({ attempt: job.attempt, a, b, u, z });
        if (job.attempt === 1) throw new RetryAfter(10, 'after step b');
        return ctx.step('c', () => ++runs.c + b.sum);
      }),
    );
    const { id } = await f.client.enqueue(kind, { n: 10 });
    await until('completed', async () => (await stateOf(id)) === 'completed');
    expect(runs).toEqual({ a: 1, b: 1, c: 1, u: 1, z: 1 });
    // Both attempts saw the same values: the first run returns what was recorded (a Date as its JSON text),
    // undefined stays undefined and null stays null.
    const values = { a: 1, b: { sum: 11, when: '1970-01-01T00:00:00.000Z' }, u: undefined, z: null };
    expect(seen).toEqual([
      { attempt: 1, ...values },
      { attempt: 2, ...values },
    ]);
    const steps = await recordedSteps(f.pool, f.schema, id);
    expect(steps.map((s) => [s.name, s.runLease])).toEqual([
      ['a', 1],
      ['b', 1],
      ['u', 1],
      ['z', 1],
      ['c', 2],
    ]);
    expect(steps.at(-1)?.result).toBe(12);
    // The operator's read: the same rows, through the client.
    expect((await f.client.jobSteps(id)).map((s) => s.name)).toEqual(['a', 'b', 'u', 'z', 'c']);
  });

  it('a host SIGKILLed after step one recorded: another host resumes the job and step one does not run again', async () => {
    const first = await ChaosWorker.spawn(
      logs.dir,
      { url: f.url, instanceId: 'steps-first', maintenance: false },
      STEPS_WORKER,
    );
    workers.push(first);
    const { id } = await f.client.enqueue(stepsKillJob, { uid: 'kill-1' });
    const lines = () =>
      readFileSync(first.cfg.log, 'utf8')
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => JSON.parse(l) as { event: string; id?: string; name?: string });
    await until('step one to return in the first host', async () =>
      lines().some((l) => l.event === 'returned' && l.id === id),
    );
    await first.kill();
    expect(await stepNames(id)).toEqual(['one']);

    const runs = { one: 0, two: 0 };
    let replayed: unknown;
    await host(
      'steps_kill',
      2,
      (h) =>
        h.register(stepsKillJob, async (job, ctx) => {
          replayed = await ctx.step('one', () => ++runs.one);
          await ctx.step('two', () => ++runs.two);
        }),
      { heartbeatIntervalMs: 200, heartbeatStalenessMs: 1_500, rescueIntervalMs: 200 },
    );
    await until(
      'the job to complete on the second host',
      async () => (await stateOf(id)) === 'completed',
      30_000,
    );
    expect(lines().filter((l) => l.event === 'ran' && l.id === id)).toHaveLength(1);
    expect(runs).toEqual({ one: 0, two: 1 });
    expect(replayed).toEqual({ at: 1 });
    expect(await f.client.getJob(id)).toMatchObject({ state: 'completed', attempt: 2 });
    expect(await stepNames(id)).toEqual(['one', 'two']);
  });
});

describe('recording is fenced', () => {
  const claimOne = async (
    queue: string,
    instanceId: string,
  ): Promise<{ batch: ClaimBatch; ref: AttemptRef }> => {
    const [batch] = await claimBatches(f.storage, f.pool, {
      queue,
      max: 1,
      instanceId,
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    const j = batch!.jobs[0]!;
    return {
      batch: batch!,
      ref: {
        claimSlot: batch!.claimSlot,
        batchId: batch!.batchId,
        idx: j.idx,
        jobId: j.id,
        runLease: j.runLease,
      },
    };
  };
  const write = (name: string, value: unknown, maxSteps = MAX_STEPS_PER_JOB) => ({
    name,
    resultJson: JSON.stringify(value),
    maxSteps,
  });

  it('a stale attempt (its lease rescued) cannot record; the next attempt replays what was recorded', async () => {
    await registerInstance(
      f.pool,
      f.schema,
      'stale-host',
      [{ queue: 'steps_stale', dlq: false, concurrency: 1 }],
      't',
    );
    const [{ id }] = (await f.client.enqueueMany([
      { kind: 'k', args: {}, options: { queue: 'steps_stale' } },
    ])) as unknown as [{ id: string }];
    const old = await claimOne('steps_stale', 'stale-host');
    expect(await recordStep(f.pool, f.schema, old.ref, write('a', 1))).toMatchObject({
      status: 'recorded',
      result: 1,
    });

    await f.pool.query(
      `update awa.runtime_instances set heartbeat_at = now() - interval '2 minutes' where instance_id = 'stale-host'`,
    );
    expect(await rescueAbandoned(f.pool, f.schema, { stalenessSeconds: 60, maxBatches: 10 })).toMatchObject([
      { jobId: id, runLease: 1, outcome: 'retry' },
    ]);
    expect(await recordStep(f.pool, f.schema, old.ref, write('b', 2))).toEqual({ status: 'closed' });
    expect(await stepNames(id)).toEqual(['a']);

    await f.pool.query(`update awa.deferred_jobs set run_at = now() where job_id = $1`, [id]);
    expect(await promoteDue(f.pool, f.schema, 10)).toBe(1);
    await registerInstance(
      f.pool,
      f.schema,
      'next-host',
      [{ queue: 'steps_stale', dlq: false, concurrency: 1 }],
      't',
    );
    const next = await claimOne('steps_stale', 'next-host');
    expect(next.ref.runLease).toBe(2);
    expect(await recordStep(f.pool, f.schema, next.ref, write('a', 99))).toMatchObject({
      status: 'replayed',
      result: 1,
    });
    expect(await recordStep(f.pool, f.schema, next.ref, write('b', 2))).toMatchObject({ status: 'recorded' });
    // The old attempt, still running somewhere, stays fenced out.
    expect(await recordStep(f.pool, f.schema, old.ref, write('c', 3))).toEqual({ status: 'closed' });
    // The job's bound is enforced in the database too.
    expect(await recordStep(f.pool, f.schema, next.ref, write('c', 3, 2))).toEqual({ status: 'limit' });
    expect(await stepNames(id)).toEqual(['a', 'b']);
  });

  it("a host's batch of records: one statement, each record fenced and answered on its own", async () => {
    await registerInstance(
      f.pool,
      f.schema,
      'batch-host',
      [{ queue: 'steps_batch', dlq: false, concurrency: 2 }],
      't',
    );
    const [{ id: a }, { id: b }] = (await f.client.enqueueMany([
      { kind: 'k', args: { n: 1 }, options: { queue: 'steps_batch' } },
      { kind: 'k', args: { n: 2 }, options: { queue: 'steps_batch' } },
    ])) as unknown as [{ id: string }, { id: string }];
    const [batch] = await claimBatches(f.storage, f.pool, {
      queue: 'steps_batch',
      max: 2,
      instanceId: 'batch-host',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    const ref = (id: string): AttemptRef => {
      const j = batch!.jobs.find((x) => x.id === id)!;
      return {
        claimSlot: batch!.claimSlot,
        batchId: batch!.batchId,
        idx: j.idx,
        jobId: id,
        runLease: j.runLease,
      };
    };
    const item = (id: string, name: string, value: unknown) => ({
      attempt: ref(id),
      write: write(name, value),
    });
    const statuses = async (items: ReturnType<typeof item>[]) =>
      (await recordSteps(f.pool, f.schema, items)).map((r) => [r.status, 'result' in r ? r.result : null]);
    expect(await statuses([item(a, 'x', 1), item(b, 'x', 2), item(a, 'y', 3)])).toEqual([
      ['recorded', 1],
      ['recorded', 2],
      ['recorded', 3],
    ]);
    await f.client.cancel(b);
    expect(await statuses([item(a, 'x', 9), item(b, 'z', 4), item(a, 'z', 5), item(a, 'z', 6)])).toEqual([
      ['replayed', 1],
      ['closed', null],
      ['recorded', 5],
      ['replayed', 5],
    ]);
    expect(await stepNames(a)).toEqual(['x', 'y', 'z']);
    expect(await stepNames(b)).toEqual(['x']);
  });

  it('two recorders racing on one name: the first insert wins, the other waits for it and returns its result', async () => {
    await registerInstance(
      f.pool,
      f.schema,
      'race-host',
      [{ queue: 'steps_race', dlq: false, concurrency: 1 }],
      't',
    );
    const [{ id }] = (await f.client.enqueueMany([
      { kind: 'k', args: {}, options: { queue: 'steps_race' } },
    ])) as unknown as [{ id: string }];
    const { ref } = await claimOne('steps_race', 'race-host');
    const first = await f.pool.connect();
    try {
      await first.query('begin');
      expect(await recordStep(first, f.schema, ref, write('race', 'first'))).toMatchObject({
        status: 'recorded',
        result: 'first',
      });
      let answered = false;
      const second = recordStep(f.pool, f.schema, ref, write('race', 'second')).finally(
        () => (answered = true),
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(answered).toBe(false); // waiting on the first one's uncommitted row
      await first.query('commit');
      expect(await second).toMatchObject({ status: 'replayed', result: 'first' });
    } finally {
      first.release();
    }
    expect((await recordedSteps(f.pool, f.schema, id)).map((s) => [s.name, s.result])).toEqual([
      ['race', 'first'],
    ]);
  });
});

describe('ctx.sleep', () => {
  it('parks without a permit (concurrency 1: another job runs meanwhile) and resumes after the time, earlier steps not run again', async () => {
    const sleeper = defineJob<{ ms: number }>({ kind: 'steps_sleeper', queue: 'steps_sleep' });
    const other = defineJob<Record<string, never>>({ kind: 'steps_other', queue: 'steps_sleep' });
    const events: { what: string; at: number; attempt?: number }[] = [];
    let before = 0;
    let after = 0;
    await host('steps_sleep', 1, (h) => {
      h.register(sleeper, async (job, ctx) => {
        events.push({ what: 'enter', at: Date.now(), attempt: job.attempt });
        await ctx.step('before', () => ++before);
        await ctx.sleep(job.args.ms);
        events.push({ what: 'woke', at: Date.now() });
        await ctx.step('after', () => ++after);
      });
      h.register(other, () => void events.push({ what: 'other', at: Date.now() }));
    });
    const { id } = await f.client.enqueue(sleeper, { ms: 1_500 });
    await until('the sleeper to park', async () => (await stateOf(id)) === 'scheduled');
    const parkedAt = Date.now();
    const { id: otherId } = await f.client.enqueue(other, {});
    await until('the other job to complete', async () => (await stateOf(otherId)) === 'completed');
    expect(await stateOf(id)).toBe('scheduled'); // still asleep: the other job ran on the permit it gave back
    await until('the sleeper to complete', async () => (await stateOf(id)) === 'completed', 10_000);

    expect(events.map((e) => e.what)).toEqual(['enter', 'other', 'enter', 'woke']);
    expect({ before, after }).toEqual({ before: 1, after: 1 });
    const wake = (await recordedSteps(f.pool, f.schema, id)).find((s) => s.name === 'awa:sleep#1');
    const wakeAt = new Date((wake?.result as { wakeAt: string }).wakeAt).getTime();
    expect(wakeAt).toBeLessThanOrEqual(parkedAt + 1_500);
    expect(events[3]!.at).toBeGreaterThanOrEqual(wakeAt);
    // A sleep spends no attempt.
    expect(events.filter((e) => e.what === 'enter').map((e) => e.attempt)).toEqual([1, 1]);
    expect(await f.client.getJob(id)).toMatchObject({ state: 'completed', attempt: 1 });
    expect(await stepNames(id)).toEqual(['before', 'awa:sleep#1', 'after']);
  });
});

describe('the typed errors', () => {
  it('bad names, duplicates, values that cannot be stored, bad sleeps and the step bound', async () => {
    const kind = defineJob<Record<string, never>>({ kind: 'steps_errors', queue: 'steps_errors' });
    const codes: Record<string, unknown> = {};
    const codeOf = async (label: string, run: () => Promise<unknown>) => {
      try {
        await run();
        codes[label] = 'ok';
      } catch (err) {
        codes[label] = err instanceof AwaError ? err.code : String(err);
      }
    };
    const handle = async (job: Job<Record<string, never>>, ctx: JobContext) => {
      const bad = ctx as unknown as { step(name: unknown, fn: unknown): Promise<unknown> };
      await codeOf('empty', () => ctx.step('', () => 1));
      await codeOf('long', () => ctx.step('x'.repeat(201), () => 1));
      await codeOf('reserved', () => ctx.step('awa:mine', () => 1));
      await codeOf('number', () => bad.step(7, () => 1));
      await codeOf('no fn', () => bad.step('fn', 42));
      await codeOf('first', () => ctx.step('dup', () => 1));
      await codeOf('dup', () => ctx.step('dup', () => 2));
      await codeOf('threw', () => ctx.step('again', () => Promise.reject(new Error('no'))));
      await codeOf('again', () => ctx.step('again', () => 3)); // a step that threw may run again
      await codeOf('too large', () => ctx.step('big', () => 'x'.repeat(70_000)));
      await codeOf('bigint', () => ctx.step('bigint', () => 1n));
      await codeOf('sleep -1', () => ctx.sleep(-1));
      await codeOf('sleep NaN', () => ctx.sleep(Number.NaN));
      await codeOf('until bad', () => ctx.sleepUntil(new Date('nope')));
      await codeOf('until past', () => ctx.sleepUntil(new Date(Date.now() - 1_000), { name: 'past' }));
      await codeOf('until past again', () => ctx.sleepUntil(new Date(), { name: 'past' }));
      await f.pool.query(
        `insert into awa.job_steps (job_id, name, result, run_lease)
         select $1, 'filler-' || i, 'null', 0 from generate_series(1, $2::int) i`,
        [job.id, MAX_STEPS_PER_JOB],
      );
      await codeOf('limit', () => ctx.step('one-too-many', () => 1)); // read once: the bound counted in the database
    };
    await host('steps_errors', 1, (h) => h.register(kind, handle));
    const { id } = await f.client.enqueue(kind, {});
    await until('completed', async () => (await stateOf(id)) === 'completed');
    expect(codes).toEqual({
      empty: 'AWA_INVALID_STEP',
      long: 'AWA_INVALID_STEP',
      reserved: 'AWA_INVALID_STEP',
      number: 'AWA_INVALID_STEP',
      'no fn': 'AWA_INVALID_STEP',
      first: 'ok',
      dup: 'AWA_DUPLICATE_STEP',
      threw: 'Error: no',
      again: 'ok',
      'too large': 'AWA_PAYLOAD_TOO_LARGE',
      bigint: 'AWA_PAYLOAD_NOT_SERIALISABLE',
      'sleep -1': 'AWA_INVALID_OPTION',
      'sleep NaN': 'AWA_INVALID_OPTION',
      'until bad': 'AWA_INVALID_OPTION',
      'until past': 'ok',
      'until past again': 'AWA_DUPLICATE_STEP',
      limit: 'AWA_STEP_LIMIT',
    });
    const names = await stepNames(id);
    expect(names.filter((n) => !n.startsWith('filler-'))).toEqual(['dup', 'again', 'awa:sleep:past']);
  });

  it('a step of an attempt cancelled meanwhile rejects with AWA_ATTEMPT_CLOSED and records nothing', async () => {
    const kind = defineJob<Record<string, never>>({ kind: 'steps_cancel', queue: 'steps_cancel' });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let code: unknown;
    await host('steps_cancel', 1, (h) =>
      h.register(kind, async (_job, ctx) => {
        await ctx.step('before', () => 1);
        await gate;
        try {
          await ctx.step('after', () => 2);
        } catch (err) {
          code = (err as AwaError).code;
        }
      }),
    );
    const { id } = await f.client.enqueue(kind, {});
    await until('step before recorded', async () => (await stepNames(id)).includes('before'));
    await f.client.cancel(id);
    await until('cancelled', async () => (await stateOf(id)) === 'cancelled');
    release();
    await until('the handler to finish', async () => code !== undefined);
    expect(code).toBe('AWA_ATTEMPT_CLOSED');
    expect(await stepNames(id)).toEqual(['before']);
  });
});

describe('worker threads', () => {
  it("refuse steps with StepsNeedInlineError: they need execution: 'inline'", async () => {
    await host('pool_step', 1, () => {}, { threadPool: { module: POOL_HANDLERS, size: 1 } });
    const { id } = await f.client.enqueue(poolStep, {});
    await until('failed', async () => (await stateOf(id)) === 'failed');
    expect((await f.client.getJob(id))?.meta?.errors?.[0]).toMatchObject({
      name: 'StepsNeedInlineError',
      error: expect.stringContaining("need execution: 'inline'") as unknown,
    });
    expect(await stepNames(id)).toEqual([]);
  });
});

describe('pruning', () => {
  it('deletes the steps of jobs that are gone past retention and keeps those of every job still held', async () => {
    await registerInstance(
      f.pool,
      f.schema,
      'prune-host',
      [{ queue: 'steps_prune', dlq: false, concurrency: 9 }],
      't',
    );
    const ids = (
      await f.client.enqueueMany(
        ['failed', 'failed-fresh', 'snoozed', 'retryable', 'running', 'completed', 'cancelled'].map(
          (label) => ({
            kind: 'k',
            args: { label },
            options: { queue: 'steps_prune' },
          }),
        ),
      )
    ).map((r) => r.id);
    const [batch] = await claimBatches(f.storage, f.pool, {
      queue: 'steps_prune',
      max: 10,
      instanceId: 'prune-host',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    const byId = new Map(batch!.jobs.map((j) => [j.id, j]));
    const ref = (id: string): AttemptRef => {
      const j = byId.get(id)!;
      return {
        claimSlot: batch!.claimSlot,
        batchId: batch!.batchId,
        idx: j.idx,
        jobId: id,
        runLease: j.runLease,
      };
    };
    for (const id of ids) {
      await recordStep(f.pool, f.schema, ref(id), { name: 's', resultJson: '1', maxSteps: 10 });
    }
    const later = new Date(Date.now() + 3_600_000);
    const end = (i: number, outcome: Outcome, extra: Partial<Settlement> = {}) =>
      settle(batch!, byId.get(ids[i]!)!, outcome, { error: { error: outcome }, ...extra });
    await settleAttempts(f.pool, f.schema, [
      end(0, 'failed'),
      end(1, 'failed'),
      end(2, 'snooze', { runAt: later, error: undefined }),
      end(3, 'retry', { runAt: later }),
      end(5, 'completed', { error: undefined }),
      end(6, 'cancelled'),
    ]);
    // Everything happened two hours ago, except that the second failure's steps are new.
    await f.pool.query(
      `update awa.done_entries set finished_at = now() - interval '2 hours' where job_id = any($1::bigint[])`,
      [ids],
    );
    await f.pool.query(
      `update awa.job_steps set recorded_at = now() - interval '2 hours' where job_id = any($1::bigint[])`,
      [ids.filter((id) => id !== ids[1])],
    );
    await cleanupHistory(f.pool, f.schema, {
      failedRetentionSeconds: 3_600,
      dlqRetentionSeconds: 3_600,
      completedRetentionSeconds: 3_600,
      limit: 100,
    });
    // One job per pass: the walk goes on from where it stopped, then starts again.
    const pass = (after: string) => pruneSteps(f.pool, f.schema, after, 1, 3_600);
    let next = '0';
    let deleted = 0;
    for (let i = 0; i < 20; i++) {
      const r = await pass(next);
      deleted += r.deleted;
      next = r.nextAfter;
      if (next === '0') break;
    }
    expect(next).toBe('0');
    expect(deleted).toBe(2);
    const kept = async () =>
      (
        await f.pool.query<{ job_id: string }>(
          `select job_id::text from awa.job_steps where job_id = any($1::bigint[]) order by 1`,
          [ids],
        )
      ).rows.map((r) => r.job_id);
    // failed and cancelled are gone (their history passed retention); the fresh failure keeps its steps until they
    // are as old as the shortest retention; the rest are all still held somewhere.
    expect(await kept()).toEqual(
      [ids[1], ids[2], ids[3], ids[4], ids[5]].sort((a, b) => Number(a) - Number(b)),
    );
    expect((await pruneSteps(f.pool, f.schema, '0', 100, 0)).deleted).toBe(1);
    expect(await kept()).toEqual([ids[2], ids[3], ids[4], ids[5]].sort((a, b) => Number(a) - Number(b)));
  });
});
