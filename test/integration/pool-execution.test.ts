import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, WorkerHost, type JobRecord, type WorkerOptions } from '../../src/index.js';
import {
  hash,
  inlineHash,
  inlineNoop,
  poolBadOutcome,
  poolCrash,
  poolHash,
  poolNoop,
  poolOutcome,
  poolStuck,
  poolWait,
} from '../fixtures/pool-handlers.js';
import { createTestDatabase } from '../helpers/database.js';

// Worker-thread execution against a real PostgreSQL: CPU-heavy kinds do not stall the coordinator, a
// throw or a dying thread fails only its own attempts, whatever a thread sends back cannot crash the
// host, aborts reach the thread, a thread that ignores its abort is terminated, and logs/progress come
// back. Outcomes are exact, and so are the errors each host reports; there is no timing assertion (pool
// against inline is shown by which of two jobs finishes first).

const FIXTURE = fileURLToPath(new URL('../fixtures/pool-handlers.ts', import.meta.url));

describe('pool execution', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let client: AwaClient;
  const hosts: WorkerHost[] = [];
  /** What each host emitted as 'error', as messages. */
  const hostErrors = new Map<WorkerHost, string[]>();
  const errorsOf = (h: WorkerHost): string[] => hostErrors.get(h)!;

  beforeAll(async () => {
    db = await createTestDatabase('pool');
    client = new AwaClient({ connectionString: db.url });
    await client.migrate();
  });
  afterAll(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await client?.close();
    await db?.drop();
  });

  /** A host serving one queue, with fast polling and maintenance so retries come back quickly. */
  function host(queue: string, concurrency: number, extra: Partial<WorkerOptions> = {}): WorkerHost {
    const h = new WorkerHost({
      connectionString: db.url,
      queues: { [queue]: concurrency },
      pollIntervalMs: 50,
      promoteIntervalMs: 50,
      leaderElectionIntervalMs: 100,
      completedRetentionMs: 600_000, // keep completed history readable by getJob()
      ...extra,
    });
    const errors: string[] = [];
    h.on('error', (err) => errors.push(err instanceof Error ? err.message : String(err)));
    hostErrors.set(h, errors);
    hosts.push(h);
    return h;
  }
  const pool = (extra: Partial<NonNullable<WorkerOptions['threadPool']>> = {}) => ({
    module: FIXTURE,
    size: 2,
    ...extra,
  });

  async function waitFor<T>(
    what: string,
    probe: () => T | Promise<T>,
    timeoutMs = 20_000,
  ): Promise<NonNullable<T>> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const v = await probe();
      if (v) return v;
      if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  const jobs = async (ids: readonly string[]): Promise<JobRecord[]> =>
    Promise.all(ids.map(async (id) => (await client.getJob(id))!));
  const allCompleted = async (ids: readonly string[]) =>
    (await jobs(ids)).every((j) => j.state === 'completed');
  const firstError = (j: JobRecord) => j.meta?.errors?.[0]?.error ?? '';

  /**
   * One long hash job of `kind` (about `ms` of CPU on an idle machine) on a host that also serves a queue of
   * quick inline jobs; once the long job runs, a quick job is enqueued. Returns which settled first, and the
   * coordinator's event-loop delay p99 over the run (reported, not asserted).
   */
  async function longBesideQuick(
    kind: typeof poolHash,
    queue: string,
    rounds: number,
  ): Promise<{ first: 'long' | 'quick'; loopDelayMs: number }> {
    const h = new WorkerHost({
      connectionString: db.url,
      queues: { [queue]: 1, [`${queue}_quick`]: 1 },
      pollIntervalMs: 50,
      completedRetentionMs: 600_000,
      ...(kind.execution === 'pool' ? { threadPool: pool() } : {}),
    });
    const errors: string[] = [];
    h.on('error', (err) => errors.push(err instanceof Error ? err.message : String(err)));
    hostErrors.set(h, errors);
    hosts.push(h);
    if (kind.execution !== 'pool') h.register(inlineHash, (job) => void hash(job.args.rounds));
    h.register(inlineNoop, () => {});
    const order: string[] = [];
    h.on('settled', (st, ok) => ok && st.outcome === 'completed' && order.push(st.jobId));
    const { id: long } = await client.enqueue(kind, { rounds }, { queue });
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    await h.start();
    // (Inline, the test's own code waits on the same thread: it may only see the long job done.)
    await waitFor(
      'the long job to be claimed',
      async () => (await client.getJob(long))?.state !== 'available',
    );
    const { id: quick } = await client.enqueue(inlineNoop, { n: 1 }, { queue: `${queue}_quick` });
    await waitFor('both jobs', () => order.includes(long) && order.includes(quick), 60_000);
    delay.disable();
    await h.stop();
    expect(errorsOf(h)).toEqual([]);
    return {
      first: order.indexOf(quick) < order.indexOf(long) ? 'quick' : 'long',
      loopDelayMs: delay.percentile(99) / 1e6,
    };
  }

  it('runs a CPU-heavy kind in the pool without stalling the coordinator; the same work inline does stall it', async () => {
    // About 600 ms of sha256 work on this machine when it is idle, whatever its speed.
    hash(20);
    const t0 = performance.now();
    hash(100);
    const rounds = Math.max(100, Math.round((100 * 600) / Math.max(1, performance.now() - t0)));
    // In the pool, the coordinator claims, runs and settles a quick job while the long one is still hashing.
    // Inline, the long job holds the coordinator's only thread: nothing else is claimed until it returns. An
    // order, not a timing: a busy machine slows the hashing at least as much as the quick job's round trips.
    const pooled = await longBesideQuick(poolHash, 'cpu_pool', rounds);
    const inline = await longBesideQuick(inlineHash, 'cpu_inline', rounds);
    const detail = `event-loop delay p99: pool ${pooled.loopDelayMs.toFixed(1)} ms, inline ${inline.loopDelayMs.toFixed(1)} ms`;
    expect(pooled.first, detail).toBe('quick');
    expect(inline.first, detail).toBe('long');
  }, 120_000);

  it('a throw fails only its own attempt, rebuilt as the same outcome; its batch-mates complete', async () => {
    const queue = 'outcomes';
    const h = host(queue, 20, { threadPool: pool({ size: 1, batchDelayMs: 20 }) });
    const failing = ['error', 'retry-after', 'snooze', 'cancel', 'fail', 'string', 'object'] as const;
    const ids = (
      await client.enqueueMany([
        ...failing.map((fail) => ({ kind: poolOutcome, args: { fail }, options: { queue } })),
        { kind: poolOutcome, args: { fail: 'error' }, options: { queue, maxAttempts: 1 } },
        ...Array.from({ length: 8 }, () => ({ kind: poolOutcome, args: {}, options: { queue } })),
      ])
    ).map((r) => r.id);
    const settled = new Set<string>();
    h.on('settled', (s, ok) => ok && settled.add(s.jobId));
    await h.start();
    await waitFor('all outcomes', () => settled.size === ids.length);
    await h.stop();
    const [error, retryAfter, snooze, cancel, fail, str, obj, lastAttempt, ...mates] = await jobs(ids);
    expect(error).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(firstError(error!)).toBe('bad input');
    expect(error!.meta?.errors?.[0]).toMatchObject({ name: 'TypeError' });
    expect(retryAfter).toMatchObject({ state: 'retryable', attempt: 1 });
    // RetryAfter(60 s) keeps its delay: not the ~2 s default backoff of a first failure.
    expect(retryAfter!.runAt!.getTime()).toBeGreaterThan(Date.now() + 50_000);
    expect(snooze!.state).toBe('scheduled');
    expect(snooze!.runAt!.getTime()).toBeGreaterThan(Date.now() + 50_000);
    expect(cancel).toMatchObject({ state: 'cancelled' });
    expect(firstError(cancel!)).toBe('no longer wanted');
    expect(fail).toMatchObject({ state: 'failed', attempt: 1 });
    expect(firstError(fail!)).toBe('hopeless');
    expect(str).toMatchObject({ state: 'retryable' });
    expect(firstError(str!)).toBe('non-Error thrown: a bare string');
    expect(firstError(obj!)).toBe('non-Error thrown: {"code":42}');
    expect(lastAttempt).toMatchObject({ state: 'failed', attempt: 1 });
    expect(mates.map((j) => [j.state, j.attempt])).toEqual(mates.map(() => ['completed', 1]));
    expect(errorsOf(h)).toEqual([]);
  }, 60_000);

  it('whatever a pool job throws or garbles on the wire fails only its own attempt, with an error naming the cause; the host stays up', async () => {
    const queue = 'bad_outcomes';
    // One job per task: a garbled message then carries no batch-mate's outcome.
    const h = host(queue, 20, { threadPool: pool({ maxBatch: 1 }) });
    const why: Record<string, string> = {
      negative:
        'the handler threw a RetryAfter with delayMs -5, which is not a number of milliseconds from 0 to 31536000000 (a year); ' +
        'the attempt failed instead. The RetryAfter\'s message: "negative delay"',
      nan: 'the handler threw a Snooze with delayMs NaN, which is not a number of milliseconds',
      'ten-years':
        'the handler threw a RetryAfter with delayMs 315360000000, which is not a number of milliseconds',
      string:
        'the handler threw a Snooze with delayMs "5000" (a string), which is not a number of milliseconds',
      'non-object': 'non-Error thrown: 42',
      unreadable: 'the handler threw a value that could not be read: no name for you',
      'wire-non-object': "the pool thread sent 42 as this job's outcome, not null or an error object",
      'wire-bad-type': 'the pool thread sent an outcome of unknown type "Teleport" (a string)',
      'wire-not-a-pair':
        'the worker thread finished its batch without a readable outcome for this job (it sent: an outcome entry names no job of the batch: "not a pair" (a string))',
      'wire-not-bytes':
        'the worker thread finished its batch without a readable outcome for this job (it sent: outcomes arrived as "garbage" (a string), not as bytes)',
      'wire-junk-message':
        'the worker thread finished its batch without a readable outcome for this job (it sent: a message that is 42, not an object)',
    };
    const cases = Object.keys(why);
    const bad = (
      await client.enqueueMany(
        cases.map((b) => ({ kind: poolBadOutcome, args: { bad: b }, options: { queue } })),
      )
    ).map((r) => r.id);
    const good = (
      await client.enqueueMany(
        Array.from({ length: 8 }, () => ({ kind: poolBadOutcome, args: {}, options: { queue } })),
      )
    ).map((r) => r.id);
    const settled = new Set<string>();
    h.on('settled', (s, ok) => ok && settled.add(s.jobId));
    await h.start();
    await waitFor('every job to settle', () => [...bad, ...good].every((id) => settled.has(id)));

    const badJobs = await jobs(bad);
    const seen = Object.fromEntries(cases.map((c, n) => [c, badJobs[n]!]));
    for (const c of cases) {
      expect(seen[c], c).toMatchObject({ state: 'failed', attempt: 1 });
      expect(seen[c]!.meta?.errors, c).toHaveLength(1);
      expect(firstError(seen[c]!), c).toContain(why[c]);
    }
    expect(seen['negative']!.meta?.errors?.[0]).toMatchObject({ name: 'InvalidOutcomeError' });
    expect((await jobs(good)).map((j) => [j.state, j.attempt])).toEqual(good.map(() => ['completed', 1]));
    // What could not be tied to a job is also reported by the host, once each.
    expect([...errorsOf(h)].sort()).toEqual(
      [
        'outcomes arrived as "garbage" (a string), not as bytes',
        'an outcome entry names no job of the batch: "not a pair" (a string)',
        'a message that is 42, not an object',
      ]
        .map((p) => `a pool thread sent something the coordinator could not read: ${p}`)
        .sort(),
    );
    // Still up: later jobs run as usual.
    const later = (
      await client.enqueueMany(
        Array.from({ length: 4 }, () => ({ kind: poolBadOutcome, args: {}, options: { queue } })),
      )
    ).map((r) => r.id);
    await waitFor('later jobs', () => later.every((id) => settled.has(id)));
    expect(await allCompleted(later)).toBe(true);
    await h.stop();
  }, 60_000);

  it('process.exit() or a crash in a handler fails only the attempts on that thread; the pool heals', async () => {
    const queue = 'crash';
    // One job per task, so "the attempts on that thread" are exactly the dying job's: every other job
    // must run once. (What happens to batch-mates of a dying job is the grace test's subject.)
    const h = host(queue, 20, { threadPool: pool({ maxBatch: 1 }) });
    const completed = new Set<string>();
    h.on('settled', (s, ok) => ok && s.outcome === 'completed' && completed.add(s.jobId));
    const [exit, crash, ...others] = (
      await client.enqueueMany([
        { kind: poolCrash, args: { mode: 'exit' }, options: { queue } },
        { kind: poolCrash, args: { mode: 'crash' }, options: { queue } },
        ...Array.from({ length: 10 }, () => ({ kind: poolCrash, args: {}, options: { queue } })),
      ])
    ).map((r) => r.id);
    await h.start();
    const first = [exit!, crash!, ...others];
    await waitFor('every job to complete', () => first.every((id) => completed.has(id)), 40_000);
    const [exitJob, crashJob, ...otherJobs] = await jobs(first);
    expect(exitJob).toMatchObject({ state: 'completed', attempt: 2 });
    expect(firstError(exitJob!)).toContain('worker thread running this job died: worker exited with code: 1');
    expect(crashJob).toMatchObject({ state: 'completed', attempt: 2 });
    expect(firstError(crashJob!)).toContain(
      'worker thread running this job died: thread crashed from a timer',
    );
    expect(otherJobs.map((j) => [j.state, j.attempt])).toEqual(otherJobs.map(() => ['completed', 1]));
    // The pool replaced its threads: later jobs, pool-wide, still run on the first attempt.
    const later = (
      await client.enqueueMany(
        Array.from({ length: 8 }, (_, n) => ({ kind: poolNoop, args: { n }, options: { queue } })),
      )
    ).map((r) => r.id);
    await waitFor('later jobs', () => later.every((id) => completed.has(id)));
    expect((await jobs(later)).map((j) => [j.state, j.attempt])).toEqual(later.map(() => ['completed', 1]));
    await h.stop();
    // The two deaths reach the jobs they hit; nothing else is reported.
    expect(errorsOf(h)).toEqual([]);
  }, 90_000);

  it('aborting a job reaches ctx.signal in its thread; logs and progress reach the coordinator', async () => {
    const queue = 'abort';
    // Two jobs on two threads: an async handler waiting for its signal holds its thread's task slot.
    const h = host(queue, 10, { threadPool: pool(), shutdownTimeoutMs: 100 });
    const logs: [string, string][] = [];
    h.on('log', (jobId, line) => logs.push([jobId, line]));
    const ids = (
      await client.enqueueMany([1, 2].map((n) => ({ kind: poolWait, args: { n }, options: { queue } })))
    ).map((r) => r.id);
    await h.start();
    await waitFor('every job waiting', () =>
      ids.every((id) => logs.some(([j, l]) => j === id && l.endsWith('waiting for its signal'))),
    );
    // Progress is what the coordinator wrote through the attempt's fence: a row per live attempt.
    const progressRows = async () =>
      (
        await client.pool.query<{ job_id: string; run_lease: number; progress: unknown }>(
          `select job_id::text, run_lease::int, progress from ${client.schema.ident}.attempt_state
            where job_id = any($1::bigint[])`,
          [ids],
        )
      ).rows.sort((a, b) => ids.indexOf(a.job_id) - ids.indexOf(b.job_id));
    await waitFor('a progress row per attempt', async () => (await progressRows()).length === ids.length);
    expect(await progressRows()).toEqual(
      ids.map((id, i) => ({ job_id: id, run_lease: 1, progress: { step: 'waiting', n: i + 1 } })),
    );
    await h.stop(); // drains for 100 ms, then aborts every running attempt
    ids.forEach((id, i) => {
      expect(logs).toContainEqual([id, `job ${i + 1} progress refused: AWA_PAYLOAD_NOT_SERIALISABLE`]);
      expect(logs).toContainEqual([id, `job ${i + 1} waiting for its signal`]);
      expect(logs).toContainEqual([id, `job ${i + 1} saw abort: worker host is stopping`]);
    });
    for (const j of await jobs(ids)) {
      expect(j).toMatchObject({ state: 'retryable', attempt: 1 });
      expect(firstError(j)).toBe('worker host is stopping');
    }
    expect(errorsOf(h)).toEqual([]);
  }, 60_000);

  it('a handler that ignores its abort past graceMs has its thread terminated and its attempt retried', async () => {
    const queue = 'stuck';
    const a = host(queue, 10, { threadPool: pool({ graceMs: 300 }), shutdownTimeoutMs: 100 });
    const spinning = new Set<string>();
    a.on('log', (jobId) => spinning.add(jobId));
    const [stuck] = (await client.enqueueMany([{ kind: poolStuck, args: { n: 1 }, options: { queue } }])).map(
      (r) => r.id,
    );
    await a.start();
    await waitFor('the job to spin', () => spinning.has(stuck!));
    await a.stop(); // aborts after 100 ms; the thread ignores it for 300 ms and is terminated
    const after = (await client.getJob(stuck!))!;
    expect(after).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(firstError(after)).toContain('ignored its abort signal (worker host is stopping) for 300 ms');
    // Another host runs the retry (attempt 2 returns at once).
    const b = host(queue, 10, { threadPool: pool({ graceMs: 300 }) });
    await b.start();
    await waitFor('the retry', async () => (await client.getJob(stuck!))?.state === 'completed', 30_000);
    expect(await client.getJob(stuck!)).toMatchObject({ state: 'completed', attempt: 2 });
    await b.stop();
    expect(errorsOf(a)).toEqual([]);
    expect(errorsOf(b)).toEqual([]);
  }, 60_000);
});
