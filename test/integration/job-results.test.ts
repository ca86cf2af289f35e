import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/main.js';
import {
  AwaClient,
  defineJob,
  FailJob,
  InvalidOptionError,
  JobNotCompletedError,
  JobNotFoundError,
  MAX_RESULT_BYTES,
  ResultTimeoutError,
  WorkerHost,
  type WorkerOptions,
} from '../../src/index.js';
import { poolHugeResult, poolSquare } from '../fixtures/result-handlers.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import type { TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// Stored results (docs/flows.md, "Results") against a real PostgreSQL: what a handler returns is stored with its
// completion and read back by getJob(), the jobs view and the CLI; result() resolves for a job that completed
// before the call and for one that completes during it, woken by the notification its waiter row asked for (no
// read while it waits); it rejects, typed, for a failed, dead-lettered, cancelled, unknown or late job; a result
// too large fails the attempt; a thread-pool handler's result comes back; cleanup keeps each queue's results for
// its own retention; and a flush nobody waits on sends no notification at all.

const FIXTURE = fileURLToPath(new URL('../fixtures/result-handlers.ts', import.meta.url));

const sum = defineJob<{ a: number; b: number }, { sum: number }>({ kind: 'sum', queue: 'results' });
const nothing = defineJob<{ n: number }>({ kind: 'nothing', queue: 'results' });
const gated = defineJob<{ n: number }, { opened: number }>({ kind: 'gated', queue: 'results' });
const boom = defineJob<{ n: number }>({ kind: 'boom', queue: 'results', maxAttempts: 1 });
const boomDlq = defineJob<{ n: number }>({ kind: 'boom_dlq', queue: 'results_dlq', maxAttempts: 1 });
const huge = defineJob<{ n: number }, string>({ kind: 'huge', queue: 'results', maxAttempts: 1 });
const kept = defineJob<{ n: number }, { n: number }>({ kind: 'kept', queue: 'ret_keep' });
const short = defineJob<{ n: number }, { n: number }>({ kind: 'short', queue: 'ret_short' });

/** Gates of 'gated' jobs: the handler waits until the test opens its job's gate. */
const gates = new Map<string, () => void>();
const gateOpened = new Map<string, Promise<void>>();
function gateOf(id: string): Promise<void> {
  let p = gateOpened.get(id);
  if (!p) gateOpened.set(id, (p = new Promise<void>((resolve) => gates.set(id, resolve))));
  return p;
}

describe('stored results', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let side: pg.Pool;
  const hosts: WorkerHost[] = [];

  function startHost(options: Partial<WorkerOptions> = {}): Promise<WorkerHost> {
    const host = new WorkerHost({
      connectionString: db.url,
      ...QUICK_HOST,
      queues: { results: 20, results_dlq: { concurrency: 5, dlq: true }, ret_keep: 5, ret_short: 5 },
      threadPool: { module: FIXTURE, size: 1 },
      ...options,
    });
    host.register(sum, (job) => ({ sum: job.args.a + job.args.b }));
    host.register(nothing, () => undefined);
    host.register(gated, async (job) => {
      await gateOf(job.id);
      return { opened: job.args.n };
    });
    host.register(boom, () => {
      throw new FailJob('boom: no result for you');
    });
    host.register(boomDlq, () => {
      throw new Error('boom into the DLQ');
    });
    host.register(huge, () => 'x'.repeat(MAX_RESULT_BYTES + 1));
    host.register(kept, (job) => ({ n: job.args.n }));
    host.register(short, (job) => ({ n: job.args.n }));
    hosts.push(host);
    return host.start().then(() => host);
  }

  beforeAll(async () => {
    ({ db, client } = await migratedDatabase('job_results'));
    side = new pg.Pool({ connectionString: db.url, max: 3 });
    // pool.end() resolves once it has asked its clients to end, not once their sessions are gone, so the drop's
    // pg_terminate_backend in afterAll can still reach one: its FATAL is then emitted on the pool (once in CI).
    side.on('error', () => {});
    // No maintenance here: the retention case starts a leader of its own, configured for it.
    await startHost({ maintenance: false });
  }, 60_000);
  afterAll(async () => {
    await stopHosts(hosts);
    await side?.end();
    await closeDatabase(client, db);
  });

  const waiterRows = async (id: string) =>
    Number(
      (await side.query('select count(*) from awa.result_waiters where job_id = $1', [id])).rows[0].count,
    );

  it("stores a handler's return value, read by getJob(), the jobs view and the CLI", async () => {
    const { id } = await client.enqueue(sum, { a: 2, b: 3 });
    // Typed by the kind: { sum: number }.
    const result: { sum: number } = await client.result(sum, id, { timeoutMs: 15_000 });
    expect(result).toEqual({ sum: 5 });

    const job = await client.getJob(id);
    expect(job).toMatchObject({ state: 'completed', result: { sum: 5 } });
    const view = await side.query('select state, result from awa.jobs where id = $1', [id]);
    expect(view.rows).toEqual([{ state: 'completed', result: { sum: 5 } }]);

    let stdout = '';
    const code = await runCli(['job', 'show', id, '--json'], {
      env: { DATABASE_URL: db.url },
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: () => {} },
    });
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toMatchObject({ id, state: 'completed', result: { sum: 5 } });
    let plain = '';
    await runCli(['job', 'show', id], {
      env: { DATABASE_URL: db.url },
      stdout: { write: (s: string) => (plain += s) },
      stderr: { write: () => {} },
    });
    expect(plain).toContain('result: { sum: 5 }');
  });

  it('a handler that returns nothing stores nothing: result() resolves with null', async () => {
    const { id } = await client.enqueue(nothing, { n: 1 });
    expect(await client.result(id, { timeoutMs: 15_000 })).toBeNull();
    expect((await client.getJob(id))?.result).toBeNull();
    const stored = await side.query('select count(*)::int as n from awa.job_results where job_id = $1', [id]);
    expect(stored.rows[0].n).toBe(0);
    // Not completed yet, or failed: no result column either.
    const { id: waiting } = await client.enqueue('unserved', {}, { queue: 'nobody_serves' });
    expect((await client.getJob(waiting))?.result).toBeNull();
  });

  it('result() of a job that completed before the call resolves at once and leaves no waiter row', async () => {
    const { id } = await client.enqueue(sum, { a: 40, b: 2 });
    await until('the job completes', async () => (await client.getJob(id))?.state === 'completed');
    expect(await client.result(id, { timeoutMs: 1_000 })).toEqual({ sum: 42 });
    expect(await waiterRows(id)).toBe(0);
  });

  it('result() of a job that completes later is woken by its notification, not by reads', async () => {
    const { id } = await client.enqueue(gated, { n: 7 });
    await until('the job runs', async () => (await client.getJob(id))?.state === 'running');
    // A session of its own hears what the result channel carries.
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (m) => heard.push(m.payload ?? ''));
    await listener.query(`listen ${listener.escapeIdentifier('awa:"awa":result')}`);
    try {
      const waiting = client.result<{ opened: number }>(id, { timeoutMs: 30_000 });
      await until('the waiter row exists', async () => (await waiterRows(id)) === 1);
      // The client's pool runs nothing while it waits: no poll.
      let acquired = 0;
      const onAcquire = () => acquired++;
      client.pool.on('acquire', onAcquire);
      await new Promise((r) => setTimeout(r, 1_000));
      client.pool.off('acquire', onAcquire);
      expect(acquired).toBe(0);
      expect(heard).toEqual([]);

      gates.get(id)!();
      expect(await waiting).toEqual({ opened: 7 });
      // The listener's session may hear it a moment after the waiter's does.
      await until('the listener hears the notification', async () => heard.length > 0);
      expect(heard).toEqual([id]);
      await until('the waiter row is gone', async () => (await waiterRows(id)) === 0);
    } finally {
      await listener.end();
    }
  });

  it('several waits of one job, from one client, share its LISTEN session and all resolve', async () => {
    const { id } = await client.enqueue(gated, { n: 8 });
    const waits = [1, 2, 3].map(() => client.result(id, { timeoutMs: 30_000 }));
    await until('three waiter rows', async () => (await waiterRows(id)) === 3);
    gateOf(id);
    await until('the gate exists', async () => gates.has(id));
    gates.get(id)!();
    expect(await Promise.all(waits)).toEqual([{ opened: 8 }, { opened: 8 }, { opened: 8 }]);
    await until('the waiter rows are gone', async () => (await waiterRows(id)) === 0);
  });

  it('a wait whose LISTEN session is lost reads the job again once it is back, and resolves', async () => {
    const { id } = await client.enqueue(gated, { n: 9 });
    const waiting = client.result(id, { timeoutMs: 30_000 });
    await until('the waiter row exists', async () => (await waiterRows(id)) === 1);
    await until('the job runs', async () => gates.has(id));
    // The session goes, and the job completes while it is down: the notification reaches nobody.
    const { rows } = await side.query(
      `select pg_terminate_backend(pid) as ended from pg_stat_activity
        where datname = current_database() and application_name = 'awa-result-listen'`,
    );
    expect(rows).toEqual([{ ended: true }]);
    gates.get(id)!();
    expect(await waiting).toEqual({ opened: 9 });
    // A new session listens again.
    await until('a new LISTEN session', async () => {
      const { rows: now } = await side.query(
        `select count(*)::int as n from pg_stat_activity
          where datname = current_database() and application_name = 'awa-result-listen'`,
      );
      return now[0].n === 1;
    });
  });

  it('rejects with JobNotCompletedError for a failed, a dead-lettered and a cancelled job', async () => {
    const failed = (await client.enqueue(boom, { n: 1 })).id;
    const failure = await client.result(failed, { timeoutMs: 15_000 }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(JobNotCompletedError);
    expect(failure).toMatchObject({
      code: 'AWA_JOB_NOT_COMPLETED',
      jobId: failed,
      state: 'failed',
      lastError: { error: 'boom: no result for you', name: 'FailJob' },
    });
    expect((await client.getJob(failed))?.result).toBeNull();

    const dead = (await client.enqueue(boomDlq, { n: 1 })).id;
    const dlq = await client.result(dead, { timeoutMs: 15_000 }).catch((e: unknown) => e);
    expect(dlq).toMatchObject({
      code: 'AWA_JOB_NOT_COMPLETED',
      state: 'dlq',
      lastError: { error: 'boom into the DLQ' },
    });

    // Cancelled while the wait is on: the cancel's own statement notifies.
    const { id: doomed } = await client.enqueue('unserved', {}, { queue: 'nobody_serves' });
    const wait = client.result(doomed, { timeoutMs: 30_000 }).catch((e: unknown) => e);
    await until('the waiter row exists', async () => (await waiterRows(doomed)) === 1);
    expect(await client.cancel(doomed, 'not needed')).toBe('available');
    const cancelled = await wait;
    expect(cancelled).toBeInstanceOf(JobNotCompletedError);
    expect(cancelled).toMatchObject({ state: 'cancelled', lastError: { error: 'not needed' } });
  });

  it('rejects with JobNotFoundError for an unknown job, and ResultTimeoutError when it does not end in time', async () => {
    const unknown = await client.result('987654321', { timeoutMs: 1_000 }).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(JobNotFoundError);
    expect(unknown).toMatchObject({ code: 'AWA_JOB_NOT_FOUND', jobId: '987654321' });
    expect(await waiterRows('987654321')).toBe(0);

    const { id } = await client.enqueue('unserved', {}, { queue: 'nobody_serves' });
    const late = await client.result(id, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(ResultTimeoutError);
    expect(late).toMatchObject({ code: 'AWA_RESULT_TIMEOUT', jobId: id, timeoutMs: 300, state: 'available' });
    await until('the waiter row is gone', async () => (await waiterRows(id)) === 0);
    await expect(client.result(id, { timeoutMs: 0 })).rejects.toBeInstanceOf(InvalidOptionError);
  });

  it('a result too large fails the attempt with PayloadTooLargeError, inline and in the thread pool', async () => {
    for (const kind of [huge, poolHugeResult]) {
      const { id } = await client.enqueue(kind, { n: 1 }, { queue: 'results' });
      const err = await client.result(id, { timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(JobNotCompletedError);
      expect(err).toMatchObject({ state: 'failed', lastError: { name: 'PayloadTooLargeError' } });
      expect((err as JobNotCompletedError).lastError?.error).toContain(`the limit is ${MAX_RESULT_BYTES}`);
    }
  });

  it("stores a thread-pool handler's result", async () => {
    const { id } = await client.enqueue(poolSquare, { n: 12 }, { queue: 'results' });
    const result: { squared: number; inThread: boolean } = await client.result(poolSquare, id, {
      timeoutMs: 30_000,
    });
    expect(result).toEqual({ squared: 144, inThread: true });
    expect((await client.getJob(id))?.result).toEqual({ squared: 144, inThread: true });
  });

  it("cleanup keeps each queue's results for its own retention", async () => {
    const shortId = (await client.enqueue(short, { n: 1 })).id;
    const keptId = (await client.enqueue(kept, { n: 2 })).id;
    await client.result(shortId, { timeoutMs: 15_000 });
    await client.result(keptId, { timeoutMs: 15_000 });
    // Both completed ten minutes ago, as far as their results are concerned.
    await side.query(
      `update awa.job_results set completed_at = now() - interval '10 minutes' where job_id = any($1::bigint[])`,
      [[shortId, keptId]],
    );
    // A leader whose configuration keeps ret_short's results one minute and the rest an hour (its
    // completedRetentionMs): cleanup runs as soon as it leads.
    await startHost({
      maintenance: true,
      completedRetentionMs: 3_600_000,
      queues: { ret_short: { concurrency: 1, resultRetentionMs: 60_000 }, ret_keep: 1 },
    });
    await until(
      'the short-lived result is gone',
      async () => (await client.getJob(shortId))?.result === null,
    );
    expect((await client.getJob(keptId))?.result).toEqual({ n: 2 });
    expect((await client.getJob(shortId))?.state).toBe('completed');
  });

  it('a flush nobody waits on sends no notification', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (m) => heard.push(m.payload ?? ''));
    await listener.query(`listen ${listener.escapeIdentifier('awa:"awa":result')}`);
    try {
      const ids = (
        await client.enqueueMany(
          Array.from({ length: 50 }, (_, i) => ({ kind: i % 2 ? sum : nothing, args: { a: i, b: 1, n: i } })),
        )
      ).map((r) => r.id);
      await until('every job completes', async () => {
        const { rows } = await side.query(
          `select count(*)::int as n from awa.jobs where id = any($1::bigint[]) and state = 'completed'`,
          [ids],
        );
        return rows[0].n === ids.length;
      });
      // A round trip on the listening session: any notification sent before it has arrived by its answer.
      await listener.query('select 1');
      expect(heard).toEqual([]);
    } finally {
      await listener.end();
    }
  });

  it('refuses result() behind a transaction pooler without a session URL, naming sessionConnectionString', async () => {
    const pooled = new AwaClient({ connectionString: db.url, pooler: 'transaction' });
    try {
      const err = await pooled.result('1', { timeoutMs: 1_000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidOptionError);
      expect(err).toMatchObject({ field: 'sessionConnectionString' });
    } finally {
      await pooled.close();
    }
  });
});
