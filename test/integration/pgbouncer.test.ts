// Awa behind PgBouncer in transaction mode (pool_mode = transaction), a server-side pool of 4 shared by every
// client of the file: producers (enqueue on callers' transactions, enqueueMany, COPY), claims, settlements,
// heartbeats, the leader's maintenance and operator calls go through the pooler; what needs a session (LISTEN,
// the leader lock, migrate's lock) takes the direct connection given as sessionConnectionString. Without one a
// host polls, does not stand for leadership, and says so once; its jobs still run.
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  defineJob,
  InvalidOptionError,
  PollingFallbackWarning,
  RetryAfter,
  WorkerHost,
  type AwaError,
  type RescuedAttempt,
  type WorkerOptions,
} from '../../src/index.js';
import { pooledKillJob, POOLED_KILL_QUEUE } from '../fixtures/pooled-jobs.js';
import { createTestDatabase, sidePool, type TestDatabase } from '../helpers/database.js';
import { QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { fieldOf } from '../helpers/option-error.js';
import { startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';
import { until } from '../helpers/wait.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const WORKER = resolve(ROOT, 'test/fixtures/pooled-worker.ts');

describe('through PgBouncer in transaction mode', () => {
  let bouncer: PgBouncer;
  let db: TestDatabase;
  /** The test database through the pooler. */
  let pooled: string;
  let client: AwaClient;
  /** Direct connections for the test's own checks. */
  let direct: pg.Pool;
  const hosts: WorkerHost[] = [];
  const hostErrors: unknown[] = [];
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    bouncer = await startPgBouncer({ poolSize: 4 });
    db = await createTestDatabase('pgbouncer');
    pooled = bouncer.via(db.url);
    direct = sidePool(db.url, 2);
    client = new AwaClient({
      connectionString: pooled,
      pooler: 'transaction',
      sessionConnectionString: db.url,
      poolSize: 4,
    });
    await client.migrate();
  });

  afterEach(async () => {
    await stopHosts(hosts);
  });

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await stopHosts(hosts);
    await client?.close();
    await direct?.end();
    await bouncer?.stop();
    await db?.drop();
  });

  /** A host whose connections lead through the pooler (tracked for stopping); its errors are collected. */
  const pooledHost = (options: Partial<WorkerOptions>): WorkerHost => {
    const host = new WorkerHost({
      connectionString: pooled,
      pooler: 'transaction',
      ...QUICK_HOST,
      ...options,
    });
    host.on('error', (err) => hostErrors.push(err));
    hosts.push(host);
    return host;
  };

  /** A pg client of the application's own, connected through the pooler. */
  const producer = async (url = pooled): Promise<pg.Client> => {
    const c = new pg.Client({ connectionString: url });
    c.on('error', () => {});
    await c.connect();
    return c;
  };

  const countsOf = async (queue: string) => {
    const c = (await client.counts()).find((q) => q.queue === queue);
    if (!c) throw new Error(`no counts for queue ${queue}`);
    return c;
  };

  /** Runnable rows and scheduled ones of `queue` as stored: counts() derives its numbers from lane cursors, which
   * count a rolled-back producer's positions until a claim walks past them. `n` picks args.n in [from, to). */
  const stored = async (queue: string, n?: [number, number]) => {
    const range = n ? `and (args->>'n')::int >= ${n[0]} and (args->>'n')::int < ${n[1]}` : '';
    const { rows } = await direct.query<{ ready: number; deferred: number }>(
      `select (select count(*)::int from awa.ready_entries where queue = $1 ${range}) as ready,
              (select count(*)::int from awa.deferred_jobs where queue = $1 ${range}) as deferred`,
      [queue],
    );
    return rows[0]!;
  };

  /** The application_name of each session holding a session-level advisory lock in this database. */
  const leaderLockHolders = async (): Promise<string[]> => {
    const { rows } = await direct.query<{ name: string }>(
      `select a.application_name as name from pg_locks l join pg_stat_activity a on a.pid = l.pid
        where l.locktype = 'advisory' and l.granted and a.datname = current_database()`,
    );
    return rows.map((r) => r.name);
  };

  /** Backends of this database per application_name, on the server itself. */
  const sessionsByName = async (): Promise<Map<string, number>> => {
    const { rows } = await direct.query<{ name: string; n: number }>(
      `select application_name as name, count(*)::int as n from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid() group by 1`,
    );
    return new Map(rows.map((r) => [r.name, r.n]));
  };

  it('validates the pooler options naming their field, and migrates only with a direct connection', async () => {
    expect(fieldOf(() => new AwaClient({ connectionString: pooled, pooler: 'session' as never }))).toBe(
      'pooler',
    );
    expect(
      fieldOf(() => new AwaClient({ connectionString: pooled, sessionConnectionString: 'mysql://x/y' })),
    ).toBe('sessionConnectionString');
    expect(fieldOf(() => new WorkerHost({ connectionString: pooled, pooler: 'statement' as never }))).toBe(
      'pooler',
    );
    expect(fieldOf(() => new WorkerHost({ connectionString: pooled, sessionConnectionString: '' }))).toBe(
      'sessionConnectionString',
    );
    const bare = new AwaClient({ connectionString: pooled, pooler: 'transaction' });
    try {
      const err = await bare.migrate().then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(InvalidOptionError);
      expect((err as InvalidOptionError).field).toBe('sessionConnectionString');
    } finally {
      await bare.close();
    }
    // beforeAll migrated through the pooler with its session lock on the direct connection: nothing is left
    // holding an advisory lock (through the pooler, the lock would stay on a server connection it shares).
    const { rows } = await direct.query<{ n: number }>(
      `select count(*)::int as n from pg_locks l join pg_database d on d.oid = l.database
        where l.locktype = 'advisory' and d.datname = current_database()`,
    );
    expect(rows[0]!.n).toBe(0);
  });

  it('leaves nothing on the server connection it shares: no statement_timeout, no prepared statement', async () => {
    // One server connection, so every client's statements land on it and the observer sees what they left.
    const single = await startPgBouncer({ poolSize: 1 });
    const url = single.via(db.url);
    const observer = await producer(url);
    const look = async () => {
      const { rows } = await observer.query<{ timeout: string; prepared: number }>(
        `select current_setting('statement_timeout') as timeout,
                (select count(*)::int from pg_prepared_statements) as prepared`,
      );
      return rows[0]!;
    };
    const kind = defineJob({ kind: 'pgb_leak', queue: 'pgb_leak' });
    const enqueueAll = async (c: AwaClient) => {
      await c.enqueue(kind, {});
      await c.enqueueMany([
        { kind, args: {} },
        { kind, args: {}, options: { delayMs: 60_000 } },
      ]);
      await c.copyEnqueue([
        { kind, args: {} },
        { kind, args: {}, options: { unique: { key: `u${Math.random()}` } } },
      ]);
    };
    try {
      const before = await look();
      const careful = new AwaClient({ connectionString: url, pooler: 'transaction', poolSize: 2 });
      try {
        await enqueueAll(careful);
      } finally {
        await careful.close();
      }
      // A host claims and settles the four runnable ones on the same server connection.
      const host = new WorkerHost({
        connectionString: url,
        pooler: 'transaction',
        queues: { pgb_leak: 4 },
        ...QUICK_HOST,
      });
      hosts.push(host);
      host.on('error', (err) => hostErrors.push(err));
      host.on('warning', () => {});
      host.register(kind, () => {});
      await host.start();
      await until('the host to settle the runnable jobs', async () => host.stats.completed === 4);
      await stopHosts(hosts);
      expect(await look()).toEqual({ timeout: before.timeout, prepared: 0 });
      // What pooler: 'transaction' prevents: a client that does not know it leaves both behind.
      const unaware = new AwaClient({ connectionString: url, poolSize: 1 });
      try {
        await enqueueAll(unaware);
      } finally {
        await unaware.close();
      }
      const after = await look();
      expect(after.timeout).toBe('30s');
      expect(after.prepared).toBe(2);
      expect(hostErrors).toEqual([]);
    } finally {
      await observer.end();
      await single.stop();
    }
  });

  it("enqueues on callers' transactions through the pooler: committed jobs exist, rolled-back ones never do", async () => {
    const kind = defineJob<{ p: number; r: number; k: number }>({ kind: 'pgb_tx', queue: 'pgb_tx' });
    // More producers than server connections: their transactions take turns on the pooler's four.
    const clients = await Promise.all(Array.from({ length: 6 }, () => producer()));
    const committed: { id: string; state: 'available' | 'scheduled' }[] = [];
    const rolledBack: string[] = [];
    try {
      await Promise.all(
        clients.map(async (c, p) => {
          for (let r = 0; r < 8; r++) {
            await c.query('begin');
            const one = await client.enqueue(kind, { p, r, k: 0 }, { client: c });
            const many = await client.enqueueMany(
              [
                { kind, args: { p, r, k: 1 } },
                { kind, args: { p, r, k: 2 } },
              ],
              { client: c },
            );
            const later = await client.enqueue(kind, { p, r, k: 3 }, { client: c, delayMs: 3_600_000 });
            const commit = r % 2 === 0;
            await c.query(commit ? 'commit' : 'rollback');
            const ids = [one, ...many].map((x) => x.id);
            if (commit) {
              committed.push(...ids.map((id) => ({ id, state: 'available' as const })));
              committed.push({ id: later.id, state: 'scheduled' });
            } else {
              rolledBack.push(...ids, later.id);
            }
          }
        }),
      );
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
    expect(committed).toHaveLength(6 * 4 * 4);
    expect(rolledBack).toHaveLength(6 * 4 * 4);
    for (const { id, state } of committed) expect((await client.getJob(id))?.state).toBe(state);
    for (const id of rolledBack) expect(await client.getJob(id)).toBeNull();
    expect(await stored('pgb_tx')).toEqual({ ready: 6 * 4 * 3, deferred: 6 * 4 });
  });

  it("COPY-enqueues through the pooler, in a transaction of its own and in the caller's", async () => {
    const kind = defineJob<{ n: number }>({ kind: 'pgb_copy', queue: 'pgb_copy' });
    const jobs = (n: number, from = 0) =>
      Array.from({ length: n }, (_, i) => ({ kind, args: { n: from + i } }));
    // Scheduled and unique jobs ride along: the load sends them through enqueue() between its COPY chunks.
    const special = [
      ...Array.from({ length: 10 }, (_, i) => ({ kind, args: { n: -i }, options: { delayMs: 3_600_000 } })),
      ...Array.from({ length: 10 }, (_, i) => ({
        kind,
        args: { n: 1000 + i },
        options: { unique: { key: `c${i}` } },
      })),
    ];
    expect(await client.copyEnqueue([...jobs(480), ...special], { chunkSize: 64 })).toEqual({
      inserted: 500,
      duplicates: 0,
    });
    expect(await client.copyEnqueue(special.slice(10), { chunkSize: 64 })).toEqual({
      inserted: 0,
      duplicates: 10,
    });
    const c = await producer();
    try {
      await c.query('begin');
      expect(await client.copyEnqueue(jobs(200, 5000), { client: c, chunkSize: 64 })).toEqual({
        inserted: 200,
        duplicates: 0,
      });
      await c.query('rollback');
      await c.query('begin');
      expect(await client.copyEnqueue(jobs(300, 9000), { client: c, chunkSize: 64 })).toEqual({
        inserted: 300,
        duplicates: 0,
      });
      await c.query('commit');
    } finally {
      await c.end();
    }
    expect(await stored('pgb_copy', [5000, 5200])).toEqual({ ready: 0, deferred: 0 });
    expect(await stored('pgb_copy', [9000, 9300])).toEqual({ ready: 300, deferred: 0 });
    expect(await stored('pgb_copy')).toEqual({ ready: 490 + 300, deferred: 10 });
  });

  it('drains through the pooler with sessions on the direct connection: each job once, retries fenced, the leader promoting', async () => {
    const kind = defineJob<{ n: number; failFirst: boolean }>({
      kind: 'pgb_drain',
      queue: 'pgb_drain',
      maxAttempts: 3,
    });
    const runs = new Map<string, { attempt: number; runLease: number }[]>();
    const warnings: AwaError[] = [];
    const drainers = [0, 1, 2].map(() => {
      const h = pooledHost({ sessionConnectionString: db.url, queues: { pgb_drain: 20 } });
      h.on('warning', (w) => warnings.push(w));
      h.register(kind, (job) => {
        const seen = runs.get(job.id) ?? [];
        seen.push({ attempt: job.attempt, runLease: job.runLease });
        runs.set(job.id, seen);
        if (job.args.failFirst && job.attempt === 1) throw new RetryAfter(10, 'the first attempt fails');
      });
      return h;
    });
    await Promise.all(drainers.map((h) => h.start()));
    const plain = 1200;
    await client.copyEnqueue(
      Array.from({ length: plain }, (_, n) => ({ kind, args: { n, failFirst: false } })),
      { chunkSize: 256 },
    );
    const retried = await client.enqueueMany(
      Array.from({ length: 60 }, (_, n) => ({ kind, args: { n, failFirst: true } })),
    );
    // Due in a moment: only the leader's promotion makes them runnable.
    const scheduled = await client.enqueueMany(
      Array.from({ length: 20 }, (_, n) => ({
        kind,
        args: { n, failFirst: false },
        options: { delayMs: 200 },
      })),
    );
    const total = plain + retried.length + scheduled.length;
    await until(
      'every job to complete',
      async () => (await countsOf('pgb_drain')).completed === total,
      60_000,
    );

    const counts = await countsOf('pgb_drain');
    expect(counts).toMatchObject({
      available: 0,
      running: 0,
      scheduled: 0,
      retryable: 0,
      failed: 0,
      completed: total,
    });
    expect(runs.size).toBe(total);
    const retriedIds = new Set(retried.map((r) => r.id));
    for (const [id, seen] of runs) {
      if (!retriedIds.has(id)) {
        expect(seen.map((s) => s.attempt)).toEqual([1]);
        continue;
      }
      expect(seen.map((s) => s.attempt)).toEqual([1, 2]);
      expect(seen[1]!.runLease).toBeGreaterThan(seen[0]!.runLease);
    }
    const stats = drainers.map((h) => h.stats);
    const sum = (k: 'completed' | 'retried' | 'stale') => stats.reduce((n, s) => n + s[k], 0);
    expect([sum('completed'), sum('retried'), sum('stale')]).toEqual([total, 60, 0]);
    expect(drainers.filter((h) => h.isLeader)).toHaveLength(1);
    expect(warnings).toEqual([]);
    // The sessions are direct: one LISTEN per host, and the leader's lock held by a session of its own.
    expect((await sessionsByName()).get('awa-listen')).toBe(3);
    expect(await leaderLockHolders()).toEqual(['awa-leader']);
    // Everything else shared the pooler's server connections, never more than its pool.
    const servers = (await bouncer.show('SHOW SERVERS')).filter((s) => s.database === db.name);
    expect(servers.length).toBeLessThanOrEqual(bouncer.poolSize);
    expect(hostErrors).toEqual([]);
  });

  it('a leader on a direct session rescues the attempt of a worker killed mid-job behind the pooler', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER, pooled], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    const lines: { event: string; id?: string; attempt?: number; runLease?: number; code?: string }[] = [];
    const stderr: string[] = [];
    createInterface({ input: child.stdout! }).on('line', (text) => lines.push(JSON.parse(text) as never));
    createInterface({ input: child.stderr! }).on('line', (text) => stderr.push(text));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    const seen = (event: string) => lines.find((l) => l.event === event);
    await until('the pooled worker to start', async () => {
      if (child.exitCode !== null) throw new Error(`the worker exited: ${stderr.join('\n')}`);
      return seen('ready');
    });
    // It has no session connection: it said so once, before it was ready.
    expect(lines.filter((l) => l.event === 'warning')).toEqual([
      expect.objectContaining({ code: 'AWA_POLLING_FALLBACK' }),
    ]);
    const { id } = await client.enqueue(pooledKillJob, { n: 1 });
    const started = await until('the worker to start the job', async () => seen('started'));
    expect([started.id, started.attempt]).toEqual([id, 1]);
    child.kill('SIGKILL');
    await exited;

    const rescued: RescuedAttempt[] = [];
    const attempts: { attempt: number; runLease: number }[] = [];
    const leader = pooledHost({
      sessionConnectionString: db.url,
      queues: { [POOLED_KILL_QUEUE]: 4 },
      heartbeatIntervalMs: 200,
      heartbeatStalenessMs: 1_000,
      rescueIntervalMs: 50,
    });
    leader.on('rescue', (r) => rescued.push(...r));
    leader.register(pooledKillJob, (job) => {
      attempts.push({ attempt: job.attempt, runLease: job.runLease });
    });
    await leader.start();
    await until(
      'the rescued job to complete',
      async () => (await client.getJob(id))?.state === 'completed',
      30_000,
    );
    expect(leader.isLeader).toBe(true);
    expect(rescued).toEqual([
      expect.objectContaining({
        jobId: id,
        runLease: started.runLease,
        reason: 'worker_lost',
        outcome: 'retry',
      }),
    ]);
    expect(attempts).toHaveLength(1);
    expect(attempts[0]!.attempt).toBe(2);
    expect(attempts[0]!.runLease).toBeGreaterThan(started.runLease!);
    expect((await client.getJob(id))?.attempt).toBe(2);
  });

  it('without a session connection: polls, does not lead, says so once; jobs run, callbacks arrive, a cancel is fenced', async () => {
    const plain = defineJob<{ n: number }>({ kind: 'pgb_poll', queue: 'pgb_poll' });
    const waits = defineJob<{ n: number }>({ kind: 'pgb_poll_wait', queue: 'pgb_poll' });
    const blocks = defineJob<{ n: number }>({ kind: 'pgb_poll_block', queue: 'pgb_poll' });
    const warnings: AwaError[] = [];
    const leadership: boolean[] = [];
    const settled: { jobId: string; accepted: boolean }[] = [];
    const ran = new Map<string, number>();
    const tokens = new Map<string, string>();
    const payloads = new Map<string, unknown>();
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const blocked: { id: string; aborted: boolean }[] = [];

    const host = pooledHost({ queues: { pgb_poll: 10 } });
    host.on('warning', (w) => warnings.push(w));
    host.on('leadership', (l) => leadership.push(l));
    host.on('settled', (s, accepted) => settled.push({ jobId: s.jobId, accepted }));
    host.register(plain, (job) => void ran.set(job.id, (ran.get(job.id) ?? 0) + 1));
    host.register(waits, async (job, ctx) => {
      const token = await ctx.registerCallback();
      tokens.set(job.id, token);
      payloads.set(job.id, await ctx.waitForCallback(token, { timeoutMs: 60_000 }));
    });
    host.register(blocks, async (job, ctx) => {
      const entry = { id: job.id, aborted: false };
      blocked.push(entry);
      await released;
      entry.aborted = ctx.signal.aborted;
    });
    await host.start();

    expect(warnings).toHaveLength(1);
    const warning = warnings[0] as PollingFallbackWarning;
    expect(warning).toBeInstanceOf(PollingFallbackWarning);
    expect([warning.code, warning.field, warning.skipsLeadership]).toEqual([
      'AWA_POLLING_FALLBACK',
      'sessionConnectionString',
      true,
    ]);
    expect(warning.message).toContain('sessionConnectionString');
    expect((await sessionsByName()).get('awa-listen')).toBeUndefined();
    expect(await leaderLockHolders()).toEqual([]);

    // Jobs run, found by polling.
    const ids = (
      await client.copyEnqueue(Array.from({ length: 300 }, (_, n) => ({ kind: plain, args: { n } })))
    ).inserted;
    expect(ids).toBe(300);
    await until(
      'the polled jobs to run',
      async () => ran.size === 300 && (await countsOf('pgb_poll')).completed === 300,
    );
    expect([...ran.values()].every((n) => n === 1)).toBe(true);

    // A callback reaches a handler waiting for it: looked up, not heard.
    const waiting = await client.enqueue(waits, { n: 1 });
    const token = await until('the handler to register its callback', async () => tokens.get(waiting.id));
    expect(await client.completeExternal(token, { answer: 42 })).toEqual({
      outcome: 'delivered',
      jobId: waiting.id,
    });
    await until('the wait to end', async () => (await client.getJob(waiting.id))?.state === 'completed');
    expect(payloads.get(waiting.id)).toEqual({ answer: 42 });

    // A cancel while it runs: nothing tells the handler (no LISTEN), and its result is fenced out.
    const cancelled = await client.enqueue(blocks, { n: 1 });
    await until('the blocking job to start', async () => blocked.length === 1);
    expect(await client.cancel(cancelled.id)).toBe('running');
    release();
    await until('its settlement to be answered', async () => settled.find((s) => s.jobId === cancelled.id));
    expect(settled.filter((s) => s.jobId === cancelled.id)).toEqual([
      { jobId: cancelled.id, accepted: false },
    ]);
    expect(blocked).toEqual([{ id: cancelled.id, aborted: false }]);
    expect((await client.getJob(cancelled.id))?.state).toBe('cancelled');

    expect(host.isLeader).toBe(false);
    expect(leadership).toEqual([]);
    expect(warnings).toHaveLength(1);
    expect(hostErrors).toEqual([]);
  });
});
