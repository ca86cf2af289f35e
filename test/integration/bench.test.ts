import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ResultRow } from '../../bench/result-row.js';
import { runCli } from '../../src/cli/main.js';
import { AwaClient, type QueueCounts, type RuntimeInstance } from '../../src/index.js';
import { createTestDatabase, serverUrl, type TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// `awa bench` and the portable adapter end to end, as the processes users and harnesses run, against the
// real server. Every bench run is checked for what it printed (stdout carries only the --json rows; the
// progress lines go to stderr), its exit code, and that the database it created is gone afterwards.
//
// Whose bench databases: the server may be shared with someone running `awa bench` at the same time, whose
// awa_bench_* databases come and go during our runs. So the bench runs as a login role of this file's own
// (CREATEDB, what docs/benchmarking.md asks of the role), and a database counts as this file's when that
// role owns it: exact, whatever else runs on the server.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const ADAPTER = fileURLToPath(new URL('../../bench/portable-adapter.ts', import.meta.url));

/** Longest a child may live: a cold tsx start plus the longest run here is well under 15 s. */
const CHILD_TIMEOUT_MS = 60_000;
/** A line of a stack trace. */
const STACK_LINE = /^\s+at /m;

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Date.now() when the process exited. */
  at: number;
}

/** A child process (node --import tsx <file>) with its output collected; killed after CHILD_TIMEOUT_MS. */
class Child {
  stdout = '';
  stderr = '';
  exit: Exit | null = null;
  timedOut = false;
  /** Resolves once the process exited and its output streams closed. */
  readonly done: Promise<Exit>;

  readonly proc: ChildProcess;

  constructor(file: string, args: readonly string[], env: Record<string, string>) {
    const proc = spawn(process.execPath, ['--import', 'tsx', file, ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.proc = proc;
    proc.stdout!.on('data', (d: Buffer) => (this.stdout += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
    proc.stdout!.on('error', () => {}); // the EPIPE test destroys it on purpose
    const timer = setTimeout(() => {
      this.timedOut = true;
      proc.kill('SIGKILL');
    }, CHILD_TIMEOUT_MS);
    proc.once('exit', (code, signal) => (this.exit = { code, signal, at: Date.now() }));
    this.done = new Promise((resolve, reject) => {
      proc.once('error', reject);
      proc.once('close', () => {
        clearTimeout(timer);
        resolve(this.exit!);
      });
    });
    running.add(this);
    void this.done.catch(() => {}).finally(() => running.delete(this));
  }

  /** stdout's complete lines, each parsed as JSON. */
  jsonLines<T>(): T[] {
    return this.stdout
      .split('\n')
      .slice(0, -1)
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as T);
  }
}

const running = new Set<Child>();

async function killRunning(): Promise<void> {
  await Promise.all(
    [...running].map((c) => {
      c.proc.kill('SIGKILL');
      return c.done.catch(() => {});
    }),
  );
}

afterEach(killRunning);

describe('awa bench', () => {
  const role = `${inject('testRunId')}_bench`;
  const password = randomBytes(12).toString('hex');
  let admin: pg.Client;
  let benchUrl = '';
  let roleCreated = false;

  /** The awa_bench_* databases this file's role owns: the ones our bench runs created. */
  async function ourBenchDatabases(): Promise<string[]> {
    const { rows } = await admin.query<{ datname: string }>(
      `select d.datname from pg_database d join pg_roles r on r.oid = d.datdba
        where r.rolname = $1 and starts_with(d.datname, 'awa_bench_') order by 1`,
      [role],
    );
    return rows.map((r) => r.datname);
  }

  /** Waits until no CREATE DATABASE of our role is running: one a killed bench left would finish later. */
  async function noCreateRunning(): Promise<void> {
    await until(
      'no create database of ours running',
      async () =>
        (
          await admin.query(
            `select 1 from pg_stat_activity where usename = $1 and query ilike 'create database%'`,
            [role],
          )
        ).rows.length === 0,
      30_000,
    );
  }

  interface BenchRun {
    code: number | null;
    signal: NodeJS.Signals | null;
    timedOut: boolean;
    stdout: string;
    stderr: string;
    rows: ResultRow[];
    /** Our bench databases before the run, those seen appearing during it, and those left after it. */
    before: string[];
    appeared: string[];
    after: string[];
  }

  /** Runs `awa bench <args>` to completion, watching the server for the databases it creates. */
  async function bench(args: readonly string[], during?: (child: Child) => Promise<void>): Promise<BenchRun> {
    const before = await ourBenchDatabases();
    const seen = new Set<string>();
    let watching = true;
    const watch = (async () => {
      while (watching) {
        for (const name of await ourBenchDatabases()) seen.add(name);
        await sleep(20);
      }
    })();
    const child = new Child(MAIN, ['bench', ...args], { DATABASE_URL: benchUrl });
    let exit: Exit;
    try {
      await during?.(child);
      exit = await child.done;
    } finally {
      watching = false;
      await watch;
    }
    return {
      code: exit.code,
      signal: exit.signal,
      timedOut: child.timedOut,
      stdout: child.stdout,
      stderr: child.stderr,
      rows: child.jsonLines<ResultRow>(),
      before,
      appeared: [...seen].filter((n) => !before.includes(n)).sort(),
      after: await ourBenchDatabases(),
    };
  }

  /** Exit 0, one --json row for `system`, and exactly one database created for it and dropped again. */
  function expectOneCleanRun(run: BenchRun, scenario: string, system: string): ResultRow {
    expect(run.timedOut).toBe(false);
    expect({ code: run.code, signal: run.signal }, run.stderr).toEqual({ code: 0, signal: null });
    expect(run.stderr).not.toMatch(STACK_LINE);
    expect(run.rows).toHaveLength(1);
    const row = run.rows[0]!;
    expect(row).toMatchObject({ scenario, system, runs: 1 });
    expect(row.runJobsPerSec).toEqual([row.jobsPerSec]);
    expect(row.environment?.postgres).toMatch(/^PostgreSQL \d+/);
    // Cleanup: the run made one database of its own for the system, and none is left.
    expect(run.appeared).toHaveLength(1);
    expect(run.appeared[0]).toMatch(new RegExp(`^awa_bench_${system}_[0-9a-f]{8}$`));
    expect(run.after).toEqual(run.before);
    return row;
  }

  /** A latency summary: every figure finite, positive, and p50 ≤ p95 ≤ p99 ≤ max (a percentile is the top of
   * its histogram bucket, which the report caps at the exact maximum). */
  function expectOrderedLatencies(s: Partial<Record<'p50Ms' | 'p95Ms' | 'p99Ms' | 'maxMs', unknown>>): void {
    const figures = [s.p50Ms, s.p95Ms, s.p99Ms, s.maxMs];
    for (const v of figures) {
      expect(typeof v).toBe('number');
      expect(Number.isFinite(v)).toBe(true);
      expect(v).toBeGreaterThan(0);
    }
    const [p50, p95, p99, max] = figures as number[];
    expect(p50).toBeLessThanOrEqual(p95!);
    expect(p95).toBeLessThanOrEqual(p99!);
    expect(p99).toBeLessThanOrEqual(max!);
  }

  /** What a drain row says the run cost: the workers' CPU and PostgreSQL's (the test server is local) per job,
   * and claims of at most `mostPerClaim` jobs. The server's CPU is read in 10 ms ticks from /proc, so a
   * drain must cost it several ticks to read above zero: at about 6 µs a job, 2,000 jobs may not. */
  function expectDrainCosts(row: ResultRow, mostPerClaim: number): void {
    const { nodeCpuUsPerJob, pgCpuUsPerJob, jobsPerClaim, jobsPerFlush } = row.extra as Record<
      string,
      number
    >;
    expect(nodeCpuUsPerJob).toBeGreaterThan(0);
    expect(pgCpuUsPerJob).toBeGreaterThan(0);
    expect(jobsPerClaim).toBeGreaterThanOrEqual(1);
    expect(jobsPerClaim).toBeLessThanOrEqual(mostPerClaim);
    expect(jobsPerFlush).toBeGreaterThanOrEqual(1);
  }

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: serverUrl() });
    await admin.connect();
    await admin.query(
      `create role ${admin.escapeIdentifier(role)} login createdb password ${admin.escapeLiteral(password)}`,
    );
    roleCreated = true;
    const url = new URL(serverUrl());
    url.username = role;
    url.password = password;
    benchUrl = url.toString();
  });

  afterAll(async () => {
    await killRunning();
    if (roleCreated) {
      // A failed test may have left a bench database behind: ours (our role owns it), so drop it first.
      await noCreateRunning();
      for (const name of await ourBenchDatabases())
        await admin.query(`drop database if exists ${admin.escapeIdentifier(name)} with (force)`);
      await admin.query(`drop role if exists ${admin.escapeIdentifier(role)}`);
    }
    await admin?.end();
  });

  it('drain --processes 2 --prefetch 0: 10000 jobs drained by 2 worker processes of 50 each, claiming only for free permits; the run database is dropped', async () => {
    const run = await bench(
      'drain --system awa --jobs 10000 --processes 2 --concurrency 100 --prefetch 0 --runs 1 --json'.split(
        ' ',
      ),
    );
    const row = expectOneCleanRun(run, 'drain', 'awa');
    expect(row.jobs).toBe(10000);
    expect(row.concurrency).toBe(100);
    expect(Number.isInteger(row.jobsPerSec)).toBe(true);
    expect(row.jobsPerSec).toBeGreaterThan(0);
    expect(row.extra).toMatchObject({ processes: 2, concurrencyPerProcess: 50 });
    // Completions are counted by the processes, not by handler calls in the harness.
    expect(row.extra).not.toHaveProperty('handlerCalls');
    // Without claiming ahead a claim takes at most a process's 50 permits.
    expectDrainCosts(row, 50);
    expect(row.settings).toMatchObject({ processes: 2, concurrencyPerProcess: 50, prefetch: 0 });
  });

  it('drain in-process: every one of 20000 jobs handled exactly once; the run database is dropped', async () => {
    const run = await bench('drain --system awa --jobs 20000 --runs 1 --json'.split(' '));
    const row = expectOneCleanRun(run, 'drain', 'awa');
    expect(row.jobs).toBe(20000);
    expect(row.concurrency).toBe(1000); // the default
    expect(row.jobsPerSec).toBeGreaterThan(0);
    expect(row.extra.handlerCalls).toBe(20000);
    expect(row.extra).not.toHaveProperty('processes');
    // Claiming ahead may take more than the free permits, never more than a claim batch.
    expectDrainCosts(row, 512);
    expect(row.settings).toMatchObject({ claimBatchSize: 512, prefetch: 'the concurrency (default)' });
  });

  it('drain --handler-us 500: every handler call spends its 0.5 ms, so 2000 jobs take at least 1 s', async () => {
    const run = await bench('drain --system awa --jobs 2000 --handler-us 500 --runs 1 --json'.split(' '));
    const row = expectOneCleanRun(run, 'drain', 'awa');
    expect(row.extra.handlerCalls).toBe(2000);
    expect(row.extra.handlerUs).toBe(500);
    // Handlers run on the harness's thread one at a time: their CPU alone is 2000 × 0.5 ms.
    expect(row.seconds).toBeGreaterThanOrEqual(1);
    expect(row.extra.nodeCpuUsPerJob).toBeGreaterThanOrEqual(500);
  });

  for (const system of ['awa', 'baseline']) {
    it(`producers (${system}): the jobs in the database equal the committed transactions`, async () => {
      const run = await bench(
        `producers --system ${system} --producers 4 --hold-ms 5 --duration 1 --runs 1 --json`.split(' '),
      );
      const row = expectOneCleanRun(run, 'producers', system);
      expect(run.stderr).not.toContain('MISMATCH');
      expect(row.jobs).toBeGreaterThan(0);
      // The warm-up second's commits are in the database but not in the rate.
      const warmupCommits = row.extra.warmupCommits as number;
      expect(warmupCommits).toBeGreaterThan(0);
      expect(row.extra).toMatchObject({
        producers: 4,
        holdMs: 5,
        errors: 0,
        jobsInDatabase: row.jobs! + warmupCommits,
        mismatch: 0,
      });
      expect(row.concurrency).toBe(4);
      expect(row.seconds).toBeGreaterThanOrEqual(1);
      // committed/s over the whole time (both rounded in the row, hence the half-unit tolerance)
      expect(Math.abs(row.jobsPerSec! - row.jobs! / row.seconds)).toBeLessThan(0.5);
      // BEGIN → COMMIT latency of each transaction, which holds it open 5 ms
      expectOrderedLatencies(row);
      expect(row.p50Ms).toBeGreaterThanOrEqual(5);
    });
  }

  it('mixed: the bulk load, the committed producer jobs and the long jobs all run; rolled-back ones do not', async () => {
    const run = await bench(
      'mixed --system awa --jobs 3000 --concurrency 50 --producers 4 --rate 100 --long 2 --runs 1 --json'.split(
        ' ',
      ),
    );
    const row = expectOneCleanRun(run, 'mixed', 'awa');
    expect(row.jobs).toBe(3000);
    expect(row.extra).toMatchObject({ producers: 4, offeredRate: 100, longJobs: 2, producerErrors: 0 });
    const committed = row.extra.committed as number;
    const rolledBack = row.extra.rolledBack as number;
    // One transaction in ten rolls back, in turn: of every ten, nine committed.
    expect(committed).toBeGreaterThan(0);
    expect(rolledBack).toBe(Math.floor((committed + rolledBack) / 10));
    // Pickups are recorded for the producer jobs enqueued during the bulk load: some, never more than committed.
    expect(row.extra.pickupSamples as number).toBeGreaterThan(0);
    expect(row.extra.pickupSamples as number).toBeLessThanOrEqual(committed);
    expectOrderedLatencies(row);
    expect(row.extra.claimCalls as number).toBeGreaterThan(0);
    expect(row.extra.jobsPerClaim as number).toBeGreaterThan(0);
  });

  it('latency: ordered percentiles after the warm-up second, and every offered job handled', async () => {
    // The first second is warm-up and not recorded, so the run needs more than one second to record any.
    const run = await bench(
      'latency --system awa --rate 100 --duration 2 --concurrency 8 --runs 1 --json'.split(' '),
    );
    const row = expectOneCleanRun(run, 'latency', 'awa');
    expect(row.concurrency).toBe(8);
    expectOrderedLatencies(row); // pickup: enqueue → handler start
    expectOrderedLatencies(row.extra.enqueueMs as Record<string, unknown>); // the enqueue's own round trip
    // The pickup after the producer heard its commit: per job never more than the whole pickup, so neither
    // is any percentile of it.
    const afterCommit = row.extra.afterCommitMs as Record<'p50Ms' | 'p95Ms' | 'p99Ms' | 'maxMs', number>;
    expectOrderedLatencies(afterCommit);
    for (const p of ['p50Ms', 'p95Ms', 'p99Ms', 'maxMs'] as const)
      expect(afterCommit[p], p).toBeLessThanOrEqual(row[p] as number);
    const early = row.extra.startedBeforeCommitHeard as number;
    expect(Number.isInteger(early) && early >= 0 && early <= (row.extra.samples as number)).toBe(true);
    expect(row.extra).toMatchObject({ offeredRate: 100, enqueueErrors: 0, unhandled: 0 });
    // jobs = the enqueues issued: open-loop pacing never issues more than rate × duration.
    expect(row.jobs).toBeGreaterThan(0);
    expect(row.jobs).toBeLessThanOrEqual(100 * 2);
    expect(row.seconds).toBeGreaterThanOrEqual(2);
    // Samples are the handled jobs enqueued after the warm-up: some, and fewer than all of them.
    const samples = row.extra.samples as number;
    expect(samples).toBeGreaterThan(0);
    expect(samples).toBeLessThan(row.jobs!);
    // unhandled 0: handled = jobs, and the rate is handled over the offered time.
    expect(Math.abs(row.jobsPerSec! - row.jobs! / row.seconds)).toBeLessThan(1);
  });

  it('SIGTERM mid-drain: exit 130, no result row, and the run database is dropped', async () => {
    const run = await bench(
      'drain --system awa --jobs 30000 --concurrency 100 --json'.split(' '),
      async (child) => {
        // Workers are running (the drain's progress has begun): the database is in full use.
        await until(
          'the drain to start',
          async () => child.stderr.includes('drain awa:') || child.exit !== null,
          30_000,
        );
        child.proc.kill('SIGTERM');
      },
    );
    expect(run.timedOut).toBe(false);
    expect({ code: run.code, signal: run.signal }, run.stderr).toEqual({ code: 130, signal: null });
    expect(run.stderr).toContain('interrupted: stopping and dropping the bench databases');
    expect(run.stderr).not.toMatch(STACK_LINE);
    expect(run.stdout).toBe('');
    expect(run.appeared).toHaveLength(1);
    expect(run.appeared[0]).toMatch(/^awa_bench_awa_[0-9a-f]{8}$/);
    expect(run.after).toEqual(run.before);
  });

  it('SIGTERM while its database is being created: the database is still dropped', async () => {
    // The bench records a database before it sends CREATE DATABASE, and the interrupt waits for that create
    // to finish before dropping: a signal in between used to leave the database behind.
    const run = await bench('drain --system awa --jobs 1000 --json'.split(' '), async (child) => {
      await until(
        'the bench to be creating its database',
        async () => {
          if (child.exit !== null) throw new Error(`the bench exited early: ${child.stderr}`);
          const { rows } = await admin.query(
            `select 1 from pg_stat_activity
              where usename = $1 and state = 'active' and query ilike 'create database awa_bench_%'`,
            [role],
          );
          return rows.length > 0;
        },
        30_000,
        2,
      );
      child.proc.kill('SIGTERM');
    });
    expect(run.timedOut).toBe(false);
    expect({ code: run.code, signal: run.signal }, run.stderr).toEqual({ code: 130, signal: null });
    expect(run.stderr).toContain('interrupted: stopping and dropping the bench databases');
    expect(run.stdout).toBe('');
    // A create the process left running would finish after it exited: wait for it, then look. (The database
    // became visible, and only then was dropped.)
    await noCreateRunning();
    expect(await ourBenchDatabases()).toEqual(run.before);
    expect(run.appeared).toHaveLength(1);
  });

  it('bad input, as a process: exit 2, one line on stderr naming the option, no stack trace, no database', async () => {
    const run = await bench('drain --processes 2 --system pgboss --jobs 10 --json'.split(' '));
    expect(run.timedOut).toBe(false);
    expect({ code: run.code, signal: run.signal }, run.stderr).toEqual({ code: 2, signal: null });
    expect(run.stderr).toBe('awa bench: --processes is not supported by pgboss\n');
    expect(run.stdout).toBe('');
    expect(run.appeared).toEqual([]);
    expect(run.after).toEqual(run.before);
  });

  it('bad input: exit code 2 and one line naming what is wrong, before any database is touched', async () => {
    // In-process through runCli (what the binary runs before process.exit(code)): each is rejected while
    // the command line is read, so a process per case would only add start-up time.
    const cases: [args: string[], stderr: string | RegExp][] = [
      [['nosuch'], /^awa bench: unknown scenario "nosuch"; usage: awa bench <[a-z0-9|-]+> \[options\]\n$/],
      [['drain', '--system', 'awa', '--jobs', '0'], 'awa bench: --jobs must be at least 1\n'],
      [['drain', '--system', 'awa', '--jobs=-5'], 'awa bench: --jobs must be at least 1\n'],
      // Node's parser does not take "-5" after a space as the value; it says so, naming the option.
      [['drain', '--system', 'awa', '--jobs', '-5'], /^awa bench: Option '--jobs' argument is ambiguous\./],
      [['drain', '--system', 'awa', '--jobs', 'many'], 'awa bench: --jobs must be a number, got "many"\n'],
      [
        ['producers', '--system', 'awa', '--processes', '2'],
        'awa bench: --processes applies to the drain scenario only\n',
      ],
      [
        ['drain', '--system', 'awa', '--processes', '2', '--handler-us', '5'],
        'awa bench: --handler-us applies to drain with in-process workers (not --processes)\n',
      ],
      [
        ['latency', '--system', 'awa', '--handler-us', '5'],
        'awa bench: --handler-us applies to drain with in-process workers (not --processes)\n',
      ],
      [['drain', '--system', 'nope'], /^awa bench: --system must be one of awa, .*, got "nope"\n$/],
      [
        ['mixed', '--system', 'awa', '--long', '20', '--concurrency', '20'],
        'awa bench: --long (20) must be below --concurrency (20)\n',
      ],
      [
        ['mixed', '--system', 'awa', '--rollback', '1.5'],
        'awa bench: --rollback must be a fraction in [0, 1], got 1.5\n',
      ],
      [['drain', '--system', 'awa', '--handler-ms', '5'], 'awa bench: --handler-ms applies to mixed only\n'],
      // The first second of a latency run is warm-up: one second would measure nothing.
      [
        ['latency', '--system', 'awa', '--duration', '1'],
        'awa bench: --duration must be more than 1 s for latency: its first 1 s are warm-up and not measured\n',
      ],
    ];
    const before = await ourBenchDatabases();
    for (const [args, expected] of cases) {
      let stdout = '';
      let stderr = '';
      const code = await runCli(['bench', ...args, '--json'], {
        env: {},
        stdout: { write: (s: string) => (stdout += s) },
        stderr: { write: (s: string) => (stderr += s) },
      });
      const what = `awa bench ${args.join(' ')}: ${stderr}`;
      expect(code, what).toBe(2);
      if (typeof expected === 'string') expect(stderr).toBe(expected);
      else expect(stderr).toMatch(expected);
      expect(stderr, what).not.toMatch(STACK_LINE);
      expect(stdout, what).toBe('');
    }
    expect(await ourBenchDatabases()).toEqual(before);
  });
});

describe('bench/portable-adapter.ts', () => {
  const INSTANCE = 3;
  const QUEUE = 'portable';
  let db: TestDatabase;
  let client: AwaClient;

  interface Line {
    kind?: string;
    system?: string;
    instance_id?: number;
    event_tables?: string[];
    extensions?: unknown[];
    db_name?: string;
    schema_version?: number | null;
    metric?: string;
    value?: number;
    window_s?: number;
  }

  function startAdapter(): Child {
    return new Child(ADAPTER, [], {
      DATABASE_URL: db.url,
      BENCH_INSTANCE_ID: String(INSTANCE),
      SAMPLE_EVERY_S: '1',
      PRODUCER_RATE: '50',
      WORKER_COUNT: '8',
      JOB_WORK_MS: '0',
    });
  }

  /**
   * Waits until the adapter reported producing jobs and completing some (both: a second adapter on the
   * same database may complete the first one's leftovers in a first, short tick before producing any).
   * Resolves to how long that took after its descriptor arrived.
   */
  async function untilWorking(adapter: Child): Promise<number> {
    let describedAt: number | null = null;
    return until(
      'enqueue_rate and completion_rate above 0',
      async () => {
        if (adapter.exit) throw new Error(`the adapter exited early: ${adapter.stderr}`);
        const lines = adapter.jsonLines<Line>();
        if (describedAt === null && lines.length > 0) describedAt = Date.now();
        if (!(total(lines, 'enqueue_rate') > 0 && total(lines, 'completion_rate') > 0)) return false;
        return Date.now() - describedAt!;
      },
      30_000,
    );
  }

  /** Σ value × window_s of a rate metric: the jobs the lines account for. */
  function total(lines: Line[], metric: string): number {
    return lines
      .filter((l) => l.metric === metric)
      .reduce((n, l) => n + Math.round(l.value! * l.window_s!), 0);
  }

  async function portableCounts(): Promise<QueueCounts> {
    const q = (await client.counts()).find((c) => c.queue === QUEUE);
    expect(q).toBeDefined();
    return q!;
  }

  /** Jobs in the queue so far; 0 before any adapter migrated the database. */
  async function jobsSoFar(): Promise<number> {
    const { rows } = await client.pool.query<{ migrated: boolean }>(
      `select to_regnamespace('awa') is not null as migrated`,
    );
    if (!rows[0]!.migrated) return 0;
    const q = (await client.counts()).find((c) => c.queue === QUEUE);
    return q ? jobsIn(q) : 0;
  }

  /** The worker hosts adapters of this instance ran: every one marked stopped (its host stopped cleanly). */
  async function expectHostsStopped(): Promise<RuntimeInstance[]> {
    const hosts = (await client.runtimeList()).filter((h) =>
      h.instanceId.startsWith(`portable-${INSTANCE}-`),
    );
    expect(hosts.length).toBeGreaterThan(0);
    expect(hosts.filter((h) => h.live || h.stoppedAt === null)).toEqual([]);
    return hosts;
  }

  const jobsIn = (q: QueueCounts) =>
    q.available + q.running + q.waiting + q.scheduled + q.retryable + q.completed + q.failed + q.cancelled;

  /**
   * After an adapter stopped: every job it produced is completed or still waiting to run: available, or
   * handed back as scheduled and already due (a claim in flight when the host began stopping returns its
   * jobs that way, unstarted). None running, failed, cancelled or retrying.
   */
  async function expectNoneLostOrStuck(q: QueueCounts): Promise<void> {
    expect({
      running: q.running,
      waiting: q.waiting,
      retryable: q.retryable,
      failed: q.failed,
      cancelled: q.cancelled,
    }).toEqual({ running: 0, waiting: 0, retryable: 0, failed: 0, cancelled: 0 });
    const { rows } = await client.pool.query<{ scheduled: number; due: number }>(
      `select count(*)::int as scheduled, count(*) filter (where run_at <= now())::int as due
         from awa.deferred_jobs where queue = $1 and state = 'scheduled'`,
      [QUEUE],
    );
    expect(rows[0]).toEqual({ scheduled: q.scheduled, due: q.scheduled });
    expect(q.completed).toBeGreaterThan(0);
  }

  beforeAll(async () => {
    db = await createTestDatabase('bench_portable');
    client = new AwaClient({ connectionString: db.url, poolSize: 2 });
  });

  afterAll(async () => {
    await killRunning();
    await client?.close();
    await db?.drop();
  });

  it('describes itself first, stamps every line with its instance, and exits 0 within 5 s of SIGTERM with every job accounted for', async () => {
    const adapter = startAdapter();
    // Within a few seconds of describing itself it produces and completes jobs (ticks come every second).
    expect(await untilWorking(adapter)).toBeLessThan(5_000);

    const [descriptor, ...metrics] = adapter.jsonLines<Line>();
    expect(descriptor).toMatchObject({
      kind: 'descriptor',
      system: 'awa-node',
      instance_id: INSTANCE,
      extensions: [],
      db_name: db.name,
    });
    expect(typeof descriptor!.schema_version).toBe('number');
    const tables = descriptor!.event_tables!;
    expect(tables).toContain('awa.ready_entries_0');
    expect(tables.filter((t) => !/^awa\.\w+$/.test(t))).toEqual([]);
    // …and every one is a table the harness can read by that name.
    const { rows } = await client.pool.query<{ missing: string[] }>(
      `select coalesce(array_agg(t) filter (where to_regclass(t) is null), '{}') as missing
         from unnest($1::text[]) t`,
      [tables],
    );
    expect(rows[0]!.missing).toEqual([]);

    expect(metrics.length).toBeGreaterThan(0);
    for (const m of metrics)
      expect(m).toMatchObject({ kind: 'adapter', system: 'awa-node', instance_id: INSTANCE });
    // Only instance 0 observes the queue depth.
    expect(metrics.filter((m) => m.metric === 'queue_depth')).toEqual([]);

    const sentAt = Date.now();
    adapter.proc.kill('SIGTERM');
    const exit = await adapter.done;
    expect({ code: exit.code, signal: exit.signal }, adapter.stderr).toEqual({ code: 0, signal: null });
    expect(exit.at - sentAt).toBeLessThan(5_000);
    expect(adapter.stderr).toContain('SIGTERM: flushing and exiting');
    expect(adapter.stderr).not.toMatch(STACK_LINE);

    // The lines written while stopping (the partial window) are stamped too, and the totals they add up
    // to are the database's: every job produced is there, completed or still waiting to run.
    const lines = adapter.jsonLines<Line>();
    expect(lines.filter((l) => l.kind === 'descriptor')).toHaveLength(1);
    expect(lines.filter((l) => l.instance_id !== INSTANCE)).toEqual([]);
    const q = await portableCounts();
    await expectNoneLostOrStuck(q);
    expect(await expectHostsStopped()).toHaveLength(1);
    expect(jobsIn(q)).toBe(total(lines, 'enqueue_rate'));
    expect(q.completed).toBe(total(lines, 'completion_rate'));
  });

  it('exits 0 without a stack trace when the harness closes its stdout, leaving no job running', async () => {
    // The two cases share this file's database: count what this run adds.
    const before = await jobsSoFar();
    const adapter = startAdapter();
    await untilWorking(adapter);
    const received = adapter.jsonLines<Line>();
    expect(received[0]).toMatchObject({ kind: 'descriptor', system: 'awa-node', instance_id: INSTANCE });
    expect(received.filter((l) => l.instance_id !== INSTANCE)).toEqual([]);

    const closedAt = Date.now();
    adapter.proc.stdout!.destroy();
    const exit = await adapter.done;
    expect({ code: exit.code, signal: exit.signal }, adapter.stderr).toEqual({ code: 0, signal: null });
    // It notices at its next line (SAMPLE_EVERY_S = 1 s), then stops as on SIGTERM (at most 5 s).
    expect(exit.at - closedAt).toBeLessThan(1_000 + 5_000 + 1_000);
    expect(adapter.stderr).toContain('stdout closed: flushing and exiting');
    expect(adapter.stderr).not.toMatch(STACK_LINE);
    expect(adapter.stderr).not.toContain('EPIPE');

    const q = await portableCounts();
    await expectNoneLostOrStuck(q);
    await expectHostsStopped();
    // It produced at least what the lines it got out before the close account for.
    expect(jobsIn(q) - before).toBeGreaterThanOrEqual(total(received, 'enqueue_rate'));
  });
});
