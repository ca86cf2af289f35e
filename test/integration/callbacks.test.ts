import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AwaClient,
  CallbackTimeout,
  defineJob,
  ExternalFailure,
  WaitForCallback,
  WorkerHost,
  type JobContext,
  type Job,
  type WorkerOptions,
} from '../../src/index.js';
import { resolveSchema } from '../../src/storage/operations.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// External callbacks end to end against a real database: parked and sequential waits, every outcome a
// callback can ask for, the guards on tokens, and the callback timeout racing a late callback.

const FAST: Partial<WorkerOptions> = {
  pollIntervalMs: 20,
  promoteIntervalMs: 20,
  rescueIntervalMs: 50,
  callbackTimeoutIntervalMs: 50,
  leaderElectionIntervalMs: 50,
  shutdownTimeoutMs: 3_000,
};

let db: TestDatabase;
let client: AwaClient;
const hosts: WorkerHost[] = [];

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('callbacks'));
});
afterEach(() => stopHosts(hosts));
afterAll(() => closeDatabase(client, db));

/** A host serving one queue with one handler; returns it started. */
async function host(
  queue: string,
  kind: ReturnType<typeof defineJob<{ n: number }>>,
  handle: (job: Job<{ n: number }>, ctx: JobContext) => unknown,
  concurrency = 1,
): Promise<WorkerHost> {
  const h = new WorkerHost({ connectionString: db.url, queues: { [queue]: concurrency }, ...FAST });
  h.on('error', () => {});
  h.register(kind, handle);
  await h.start();
  hosts.push(h);
  return h;
}

const state = async (id: string) => (await client.getJob(id))?.state;

describe('parked callbacks', () => {
  it('parks the job and frees its permit; complete settles it with the payload as its result', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_complete', queue: 'cb_park' });
    const tokens = new Map<number, string>();
    const ran: number[] = [];
    await host('cb_park', kind, async (job, ctx) => {
      ran.push(job.args.n);
      tokens.set(job.args.n, await ctx.registerCallback());
      throw new WaitForCallback();
    });
    // Concurrency 1: the second job only runs because the first one's permit was freed when it parked.
    const { id: a } = await client.enqueue(kind, { n: 1 });
    const { id: b } = await client.enqueue(kind, { n: 2 });
    await until(
      'both jobs parked',
      async () => (await state(a)) === 'waiting_external' && (await state(b)) === 'waiting_external',
    );
    expect(ran).toEqual([1, 2]);
    expect((await client.counts()).find((c) => c.queue === 'cb_park')).toMatchObject({
      waiting: 2,
      running: 0,
    });

    expect(await client.completeExternal(tokens.get(1)!, { receipt: 'r-1' })).toEqual({
      outcome: 'settled',
      jobId: a,
    });
    const done = await client.getJob(a);
    expect(done).toMatchObject({ state: 'completed', attempt: 1 });
    expect(done?.meta?.result).toEqual({ receipt: 'r-1' });
    // The same token again changes nothing.
    expect(await client.completeExternal(tokens.get(1)!, { receipt: 'again' })).toEqual({
      outcome: 'rejected',
      jobId: null,
    });
    expect((await client.getJob(a))?.meta).toMatchObject({ result: { receipt: 'r-1' } });
    expect(await state(b)).toBe('waiting_external');
  });

  it('fail, cancel and retry-with-delay settle a parked job as asked', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_outcomes', queue: 'cb_outcomes', maxAttempts: 5 });
    const tokens = new Map<string, string>();
    const attempts: number[] = [];
    await host(
      'cb_outcomes',
      kind,
      async (job, ctx) => {
        attempts.push(job.attempt);
        if (job.args.n === 3 && job.attempt === 2) return; // the retried job completes on its second attempt
        tokens.set(`${job.args.n}:${job.attempt}`, await ctx.registerCallback());
        throw new WaitForCallback();
      },
      3,
    );
    const ids = await Promise.all([1, 2, 3].map(async (n) => (await client.enqueue(kind, { n })).id));
    await until('all parked', async () =>
      (await Promise.all(ids.map(state))).every((s) => s === 'waiting_external'),
    );

    await client.failExternal(tokens.get('1:1')!, 'card declined');
    expect(await client.getJob(ids[0]!)).toMatchObject({ state: 'failed', attempt: 1 });
    expect((await client.getJob(ids[0]!))?.meta?.errors?.at(-1)?.error).toBe('card declined');

    await client.cancelExternal(tokens.get('2:1')!, 'order withdrawn');
    expect(await client.getJob(ids[1]!)).toMatchObject({ state: 'cancelled' });

    const before = Date.now();
    expect((await client.retryExternal(tokens.get('3:1')!, { delayMs: 400 })).outcome).toBe('settled');
    const retrying = await client.getJob(ids[2]!);
    expect(retrying).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(retrying!.runAt!.getTime()).toBeGreaterThanOrEqual(before + 400 - 50);
    await until('the retried job to complete', async () => (await state(ids[2]!)) === 'completed');
    expect((await client.getJob(ids[2]!))?.attempt).toBe(2);
  });

  it('retry on the last attempt ends the job as failed (or in the DLQ), like any failed attempt', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_last', queue: 'cb_last', maxAttempts: 2 });
    const dlqKind = defineJob<{ n: number }>({ kind: 'park_last_dlq', queue: 'cb_last_dlq', maxAttempts: 1 });
    const tokens = new Map<string, string>();
    const park = async (job: Job<{ n: number }>, ctx: JobContext) => {
      tokens.set(`${job.args.n}:${job.attempt}`, await ctx.registerCallback());
      throw new WaitForCallback();
    };
    await host('cb_last', kind, park);
    const h = new WorkerHost({
      connectionString: db.url,
      queues: { cb_last_dlq: { concurrency: 1, dlq: true } },
      ...FAST,
    });
    h.on('error', () => {});
    h.register(dlqKind, park);
    await h.start();
    hosts.push(h);

    const { id } = await client.enqueue(kind, { n: 1 });
    // Parked, not just registered: a callback that arrives while the attempt still runs is delivered to it.
    await until(
      'parked on attempt 1',
      async () => tokens.has('1:1') && (await state(id)) === 'waiting_external',
    );
    expect((await client.retryExternal(tokens.get('1:1')!, { delayMs: 0 })).outcome).toBe('settled');
    await until(
      'parked on attempt 2',
      async () => tokens.has('1:2') && (await state(id)) === 'waiting_external',
    );
    // The second of two attempts: a retry has nowhere to go but failed.
    expect((await client.retryExternal(tokens.get('1:2')!, { error: 'still down' })).outcome).toBe('settled');
    const failed = await client.getJob(id);
    expect(failed).toMatchObject({ state: 'failed', attempt: 2, maxAttempts: 2 });
    expect(failed?.meta?.errors?.at(-1)?.error).toBe('still down');

    const { id: toDlq } = await client.enqueue(dlqKind, { n: 2 });
    await until(
      'parked on its only attempt',
      async () => tokens.has('2:1') && (await state(toDlq)) === 'waiting_external',
    );
    expect((await client.retryExternal(tokens.get('2:1')!)).outcome).toBe('settled');
    expect(await client.getJob(toDlq)).toMatchObject({ state: 'dlq', attempt: 1 });
  });

  it('resume runs the handler again, same attempt, with the payload on the job', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_resume', queue: 'cb_resume' });
    let token = '';
    const seen: { attempt: number; payload: unknown }[] = [];
    await host('cb_resume', kind, async (job, ctx) => {
      seen.push({ attempt: job.attempt, payload: job.callback?.payload });
      if (!job.callback) {
        token = await ctx.registerCallback();
        throw new WaitForCallback();
      }
    });
    const { id } = await client.enqueue(kind, { n: 1 });
    await until('parked', async () => (await state(id)) === 'waiting_external');
    expect(await client.resumeExternal(token, { approved: true })).toEqual({ outcome: 'settled', jobId: id });
    await until('completed after resume', async () => (await state(id)) === 'completed');
    expect(seen).toEqual([
      { attempt: 1, payload: undefined },
      { attempt: 1, payload: { approved: true } },
    ]);
    // The record keeps the resuming callback (typed on JobRecord.meta, as result is).
    const record = await client.getJob(id);
    expect(record?.meta?.callback?.payload).toEqual({ approved: true });
    expect(Number.isNaN(Date.parse(record?.meta?.callback?.at ?? ''))).toBe(false);
  });

  it('a timeout the leader has seen fires at its deadline, not at its next look', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_deadline', queue: 'cb_deadline', maxAttempts: 3 });
    // Parked by a host that does not lead, before any leader exists.
    const parker = new WorkerHost({
      connectionString: db.url,
      queues: { cb_deadline: 1 },
      ...FAST,
      maintenance: false,
    });
    parker.register(kind, async (_job, ctx) => {
      await ctx.registerCallback({ timeoutMs: 2_000 });
      throw new WaitForCallback();
    });
    await parker.start();
    hosts.push(parker);
    const { id } = await client.enqueue(kind, { n: 1 });
    await until('parked', async () => (await state(id)) === 'waiting_external');
    const { rows } = await client.pool.query<{ timeout_at: Date }>(
      `select timeout_at from ${resolveSchema().ident}.waiting_jobs where job_id = $1`,
      [id],
    );
    const deadline = rows[0]!.timeout_at;
    // A leader that looks for timeouts (and rescues) once a minute: its first look, at once, sees the deadline.
    const leader = new WorkerHost({
      connectionString: db.url,
      queues: { cb_other: 1 },
      ...FAST,
      rescueIntervalMs: 60_000,
      callbackTimeoutIntervalMs: 60_000,
    });
    leader.on('error', () => {});
    await leader.start();
    hosts.push(leader);
    await until('timed out', async () => (await state(id)) === 'retryable', 20_000);
    const error = (await client.getJob(id))?.meta?.errors?.at(-1);
    expect(error).toMatchObject({ error: 'callback timed out', name: 'CallbackTimeout' });
    // Never before its deadline; and long before the leader's next look would have found it.
    const firedAt = new Date(error!.at).getTime();
    expect(firedAt).toBeGreaterThanOrEqual(deadline.getTime());
    expect(firedAt - deadline.getTime()).toBeLessThan(60_000);
  });

  it('a timed-out parked job is retried through the normal path and its late callback loses', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_timeout', queue: 'cb_timeout', maxAttempts: 3 });
    const tokens: string[] = [];
    await host('cb_timeout', kind, async (_job, ctx) => {
      tokens.push(await ctx.registerCallback({ timeoutMs: 200 }));
      throw new WaitForCallback();
    });
    const { id } = await client.enqueue(kind, { n: 1 });
    await until(
      'the first attempt to time out',
      async () => (await client.getJob(id))?.state === 'retryable',
      10_000,
    );
    const job = await client.getJob(id);
    expect(job?.meta?.errors?.at(-1)).toMatchObject({ error: 'callback timed out', name: 'CallbackTimeout' });
    expect(await client.completeExternal(tokens[0]!)).toEqual({ outcome: 'rejected', jobId: null });
    expect((await client.getJob(id))?.state).toBe('retryable');
  });

  it('the timeout racing a late callback: exactly one of them settles each job', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_race', queue: 'cb_race', maxAttempts: 1 });
    const tokens = new Map<number, string>();
    await host(
      'cb_race',
      kind,
      async (job, ctx) => {
        tokens.set(job.args.n, await ctx.registerCallback({ timeoutMs: 150 }));
        throw new WaitForCallback();
      },
      40,
    );
    const N = 40;
    const ids = await Promise.all(
      Array.from({ length: N }, async (_, n) => (await client.enqueue(kind, { n })).id),
    );
    // Parked (or already timed out), not just registered: a callback that reaches a running attempt is delivered
    // to it, which is neither outcome this race is about.
    await until(
      'all parked',
      async () =>
        tokens.size === N &&
        (await Promise.all(ids.map(state))).every((s) => s === 'waiting_external' || s === 'failed'),
    );
    // Deliver every callback around the moment the leader times them out.
    await new Promise((r) => setTimeout(r, 120));
    const results = await Promise.all(
      [...tokens.entries()].map(([, t]) => client.completeExternal(t, { late: true })),
    );
    await until(
      'all settled',
      async () => (await Promise.all(ids.map(state))).every((s) => s === 'completed' || s === 'failed'),
      10_000,
    );
    const states = await Promise.all(ids.map(state));
    const won = results.filter((r) => r.outcome === 'settled').length;
    // A callback that won left the job completed; one that lost found it failed by the timeout (1 attempt).
    expect(states.filter((s) => s === 'completed').length).toBe(won);
    expect(states.filter((s) => s === 'failed').length).toBe(N - won);
    expect(results.every((r) => r.outcome === 'settled' || r.outcome === 'rejected')).toBe(true);
  });

  it('a handler that parks without registering a callback fails its attempt, saying why', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_unregistered', queue: 'cb_unreg', maxAttempts: 1 });
    await host('cb_unreg', kind, () => {
      throw new WaitForCallback();
    });
    const { id } = await client.enqueue(kind, { n: 1 });
    await until('failed', async () => (await state(id)) === 'failed');
    expect((await client.getJob(id))?.meta?.errors?.at(-1)?.error).toMatch(/registerCallback/);
  });
});

describe('sequential waits', () => {
  it('the handler waits holding its permit, gets the payload and carries on in the same attempt', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'seq_ok', queue: 'cb_seq' });
    let token = '';
    const got: unknown[] = [];
    await host('cb_seq', kind, async (_job, ctx) => {
      token = await ctx.registerCallback();
      got.push(await ctx.waitForCallback(token, { timeoutMs: 10_000 }));
    });
    const { id } = await client.enqueue(kind, { n: 1 });
    await until('the handler to wait', async () => token !== '' && (await state(id)) === 'running');
    expect(await client.resumeExternal(token, { step: 2 })).toEqual({ outcome: 'delivered', jobId: id });
    await until('completed', async () => (await state(id)) === 'completed');
    expect(got).toEqual([{ step: 2 }]);
    expect((await client.getJob(id))?.attempt).toBe(1);
    // Used once: the second delivery is rejected.
    expect((await client.completeExternal(token)).outcome).toBe('rejected');
  });

  it('a callback that arrives before the handler waits is not lost', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'seq_early', queue: 'cb_early' });
    const got: unknown[] = [];
    await host('cb_early', kind, async (_job, ctx) => {
      const token = await ctx.registerCallback();
      expect((await client.completeExternal(token, 'early')).outcome).toBe('delivered');
      got.push(await ctx.waitForCallback(token));
    });
    const { id } = await client.enqueue(kind, { n: 1 });
    await until('completed', async () => (await state(id)) === 'completed');
    expect(got).toEqual(['early']);
  });

  it('fail reaches the waiting handler as an ExternalFailure; a timeout as a CallbackTimeout', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'seq_fail', queue: 'cb_seqfail', maxAttempts: 1 });
    const caught: string[] = [];
    let token = '';
    await host(
      'cb_seqfail',
      kind,
      async (job, ctx) => {
        const t = await ctx.registerCallback();
        if (job.args.n === 1) token = t;
        try {
          await ctx.waitForCallback(t, { timeoutMs: job.args.n === 1 ? 10_000 : 150 });
        } catch (err) {
          caught.push((err as Error).name);
          throw err;
        }
      },
      2,
    );
    const { id: failing } = await client.enqueue(kind, { n: 1 });
    const { id: timing } = await client.enqueue(kind, { n: 2 });
    await until('the first handler to wait', async () => token !== '');
    await client.failExternal(token, 'rejected by reviewer');
    await until(
      'both failed',
      async () => (await state(failing)) === 'failed' && (await state(timing)) === 'failed',
    );
    expect(caught.sort()).toEqual([CallbackTimeout.name, ExternalFailure.name].sort());
    expect((await client.getJob(failing))?.meta?.errors?.at(-1)?.error).toBe('rejected by reviewer');
  });

  it('a callback for an older attempt, or after the attempt was cancelled, is rejected', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'seq_stale', queue: 'cb_stale', maxAttempts: 3 });
    const tokens: string[] = [];
    await host('cb_stale', kind, async (job, ctx) => {
      const t = await ctx.registerCallback();
      tokens.push(t);
      if (job.attempt === 1) throw new Error('first attempt fails');
      await ctx.waitForCallback(t, { timeoutMs: 10_000 });
    });
    const { id } = await client.enqueue(kind, { n: 1 });
    await until(
      'the second attempt to wait',
      async () => tokens.length === 2 && (await state(id)) === 'running',
      15_000,
    );
    expect((await client.completeExternal(tokens[0]!)).outcome).toBe('rejected');
    expect(await client.cancel(id)).toBe('running');
    expect((await client.completeExternal(tokens[1]!)).outcome).toBe('rejected');
    expect(await state(id)).toBe('cancelled');
  });
});

describe('a callback that arrives before the job parks', () => {
  it('settles the job when it parks instead of leaving it waiting', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'park_early', queue: 'cb_park_early', maxAttempts: 3 });
    const answers: string[] = [];
    await host(
      'cb_park_early',
      kind,
      async (job, ctx) => {
        const token = await ctx.registerCallback();
        // The outside service answers before the handler has even parked: the callback is recorded on the
        // still-open attempt ('delivered'), and parking then applies it.
        const action = job.args.n === 1 ? 'complete' : 'retry';
        const r =
          action === 'complete'
            ? await client.completeExternal(token, { fast: true })
            : await client.retryExternal(token, { delayMs: 60_000, error: 'try later' });
        answers.push(r.outcome);
        throw new WaitForCallback();
      },
      2,
    );
    const { id: done } = await client.enqueue(kind, { n: 1 });
    const { id: retried } = await client.enqueue(kind, { n: 2 });
    await until(
      'both settled',
      async () => (await state(done)) === 'completed' && (await state(retried)) === 'retryable',
      5_000,
    );
    expect(answers).toEqual(['delivered', 'delivered']);
    expect((await client.getJob(done))?.meta).toMatchObject({ result: { fast: true } });
    const r = await client.getJob(retried);
    expect(r).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(r?.meta?.errors?.at(-1)?.error).toBe('try later');
    expect(r!.runAt!.getTime()).toBeGreaterThan(Date.now() + 50_000);
  });

  it('a retry that arrives before the last attempt parks fails the job', async () => {
    const kind = defineJob<{ n: number }>({
      kind: 'park_early_last',
      queue: 'cb_early_last',
      maxAttempts: 1,
    });
    const answers: string[] = [];
    await host('cb_early_last', kind, async (_job, ctx) => {
      const token = await ctx.registerCallback();
      answers.push((await client.retryExternal(token, { error: 'no more' })).outcome);
      throw new WaitForCallback();
    });
    const { id } = await client.enqueue(kind, { n: 1 });
    await until('settled', async () => (await state(id)) === 'failed', 5_000);
    expect(answers).toEqual(['delivered']);
    expect(await client.getJob(id)).toMatchObject({ state: 'failed', attempt: 1 });
  });
});
