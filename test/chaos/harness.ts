// Shared machinery of the chaos suite: worker child processes (test/fixtures/chaos-worker.ts) and their
// JSON-line logs, waiting on the database, and the scene (database, client, log directory) each scenario
// file works in. The end-of-run checks live in invariants.ts.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { AwaClient } from '../../src/index.js';
import type { ChaosLine, ChaosWorkerConfig } from '../fixtures/chaos-jobs.js';
import type { RunReport } from './invariants.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { completeJsonLines } from '../helpers/json-lines.js';
import { until } from '../helpers/wait.js';

export const FIXTURE = fileURLToPath(new URL('../fixtures/chaos-worker.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export type AttemptLine = Extract<ChaosLine, { event: 'start' | 'end' | 'abort' }>;

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A process's state letter from /proc (R running, S sleeping, T stopped…). */
function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

/** Polls `cond` until it holds; fails with `what` after `timeoutMs`. */
export const waitFor = (
  what: string,
  cond: () => boolean | Promise<boolean>,
  timeoutMs: number,
  everyMs = 25,
): Promise<unknown> => until(what, async () => await cond(), timeoutMs, everyMs);

/** A temporary directory for the logs of one scenario. */
export function logDir(label: string): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), `awa-chaos-${label}-`));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** One chaos worker process and what the test did to it. */
export class ChaosWorker {
  /** When the test sent SIGKILL (the process is dead from shortly after). */
  killedAt: number | null = null;
  private stopping = false;
  /** [SIGSTOP sent, SIGCONT sent] intervals. */
  readonly frozen: [number, number][] = [];
  private stderr = '';
  readonly exited: Promise<number | null>;

  private constructor(
    readonly cfg: ChaosWorkerConfig,
    readonly proc: ChildProcess,
  ) {
    proc.stderr?.on('data', (d: Buffer) => (this.stderr = (this.stderr + d.toString()).slice(-8_000)));
    proc.stdout?.on('data', () => {});
    this.exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  }

  /** `fixture`: another worker script taking the same config (default test/fixtures/chaos-worker.ts). */
  static async spawn(
    dir: string,
    cfg: Omit<ChaosWorkerConfig, 'log'>,
    fixture = FIXTURE,
  ): Promise<ChaosWorker> {
    const full: ChaosWorkerConfig = { ...cfg, log: join(dir, `${cfg.instanceId}.jsonl`) };
    const proc = spawn(process.execPath, ['--import', 'tsx', fixture, JSON.stringify(full)], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const w = new ChaosWorker(full, proc);
    let exit: number | null | undefined;
    void w.exited.then((code) => (exit = code));
    await waitFor(
      `worker ${cfg.instanceId} to be ready`,
      () => {
        if (exit !== undefined) throw new Error(`worker ${cfg.instanceId} exited with ${exit}: ${w.stderr}`);
        return w.lines().some((l) => l.event === 'ready');
      },
      30_000,
    );
    return w;
  }

  get instanceId(): string {
    return this.cfg.instanceId;
  }

  get pid(): number {
    return this.proc.pid!;
  }

  get stderrTail(): string {
    return this.stderr;
  }

  lines(): ChaosLine[] {
    return completeJsonLines<ChaosLine>(this.cfg.log);
  }

  /** Attempts started here and not ended (by 'end') yet. */
  running(): AttemptLine[] {
    const open = new Map<string, AttemptLine>();
    for (const l of this.lines()) {
      if (l.event === 'start') open.set(`${l.id}:${l.runLease}`, l);
      else if (l.event === 'end') open.delete(`${l.id}:${l.runLease}`);
    }
    return [...open.values()];
  }

  isLeader(): boolean {
    let leader = false;
    for (const l of this.lines()) if (l.event === 'leadership') leader = l.isLeader;
    return leader;
  }

  async kill(): Promise<number> {
    this.killedAt = Date.now();
    this.proc.kill('SIGKILL');
    await this.exited;
    return this.killedAt;
  }

  /**
   * Stops the process (SIGSTOP) at a moment it has attempts running, and returns them. Read while it is
   * stopped, the log is final. Its jobs run in lockstep (a claim's jobs start together and sleep alike), so
   * a whole batch can end in the instant between reading the log and signalling; stopping first and reading
   * after closes that gap.
   */
  stopMidJob(timeoutMs = 20_000): Promise<AttemptLine[]> {
    return this.stopWhen(
      'had an attempt running',
      async () => {
        const running = this.running();
        return running.length > 0 ? running : undefined;
      },
      timeoutMs,
    );
  }

  /**
   * Stops the process (SIGSTOP) at a moment `check` finds what it looks for, read while the process is
   * stopped (its log and its rows can no longer change), and returns what it found. A stop that finds
   * nothing is undone at once (a pause of a few ms) and tried again. Recorded as a freeze from the stop on;
   * kill() or thaw() may follow.
   */
  async stopWhen<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const at = Date.now();
      this.proc.kill('SIGSTOP');
      await waitFor(`worker ${this.instanceId} to stop`, () => processState(this.pid) === 'T', 5_000, 1);
      const found = await check();
      if (found !== undefined) {
        this.frozen.push([at, Number.POSITIVE_INFINITY]);
        return found;
      }
      this.proc.kill('SIGCONT');
      if (Date.now() > deadline) throw new Error(`worker ${this.instanceId} never ${what}`);
      await sleep(5);
    }
  }

  thaw(): void {
    this.proc.kill('SIGCONT');
    const last = this.frozen.at(-1);
    if (last) last[1] = Date.now();
  }

  /** Graceful stop (SIGTERM → host.stop()); resolves with the exit code. */
  async stop(): Promise<number | null> {
    this.stopping = true;
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return this.proc.exitCode;
    this.proc.kill('SIGTERM');
    return this.exited;
  }

  /** Makes sure the process is gone, whatever state the test left it in. */
  async dispose(): Promise<void> {
    this.stopping = true;
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill('SIGKILL');
    await this.exited;
  }

  /** Why the process died when the test neither killed nor stopped it (e.g. an unhandled rejection), or null. */
  crash(): string | null {
    if (this.killedAt !== null || this.stopping) return null;
    if (this.proc.exitCode === null && this.proc.signalCode === null) return null;
    return `worker ${this.instanceId} (pid ${this.pid}) died on its own (exit ${this.proc.exitCode ?? this.proc.signalCode}): ${this.stderr.slice(-1_500)}`;
  }

  /** True when this process was dead or frozen at time t. */
  deadOrFrozenAt(t: number): boolean {
    if (this.killedAt !== null && this.killedAt <= t) return true;
    return this.frozen.some(([from, to]) => from <= t && t <= to);
  }
}

/** The worker settings shared by the scenarios. */
export function workerConfig(
  url: string,
  instanceId: string,
  extra: Partial<ChaosWorkerConfig> = {},
): Omit<ChaosWorkerConfig, 'log'> {
  return { url, instanceId, queues: { chaos: { concurrency: 8 } }, ...extra };
}

/** A pg.Pool for the test's own queries, tagged so it is easy to tell apart in pg_stat_activity. */
export function testPool(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, application_name: 'chaos-test' });
  pool.on('error', () => {});
  return pool;
}

/** Throws with the stderr of any worker that died without the test killing or stopping it. */
export function assertNoCrash(workers: readonly ChaosWorker[]): void {
  const crashes = workers.map((w) => w.crash()).filter((c) => c !== null);
  if (crashes.length > 0) throw new Error(crashes.join('\n---\n'));
}

/**
 * Waits until every expected job is terminal (completed/failed in counts of its queues); fails at once
 * if a worker dies on its own meanwhile.
 */
export async function waitForTerminal(
  client: AwaClient,
  queues: readonly string[],
  total: number,
  timeoutMs: number,
  workers: readonly ChaosWorker[] = [],
): Promise<void> {
  let last = '';
  try {
    await waitFor(
      `${total} terminal jobs`,
      async () => {
        assertNoCrash(workers);
        let all;
        try {
          all = await client.counts();
        } catch (err) {
          last = `counts failed: ${(err as Error).message}`; // e.g. the server is restarting
          return false;
        }
        const counts = all.filter((c) => queues.includes(c.queue));
        last = JSON.stringify(counts);
        return terminalIn(counts) >= total;
      },
      timeoutMs,
      100,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; counts: ${last}`);
  }
}

type QueueCounts = Awaited<ReturnType<AwaClient['counts']>>;

function terminalIn(counts: QueueCounts): number {
  return counts.reduce((n, c) => n + c.completed + c.failed + c.cancelled, 0);
}

/** Jobs of `queues` that are completed, failed or cancelled now: what an earlier scenario on the same queue left. */
export async function terminalJobs(client: AwaClient, queues: readonly string[]): Promise<number> {
  return terminalIn((await client.counts()).filter((c) => queues.includes(c.queue)));
}

/** Prints one scenario's figures in a form the report can quote. */
export function printReport(
  scenario: string,
  report: RunReport,
  timings: Record<string, number | string> = {},
): void {
  const { violations, ...figures } = report;
  console.log(
    `[chaos] ${scenario}: ${JSON.stringify({ ...figures, violations: violations.length, ...timings })}`,
  );
}

/** What every scenario file sets up: its own migrated database, a client, a small query pool, a log dir. */
export interface Scene {
  db: TestDatabase;
  client: AwaClient;
  pool: pg.Pool;
  logs: { dir: string; remove(): void };
  /** Ends the client's connections (e.g. so their sessions flush statistics); safe to call again. */
  closeClient(): Promise<void>;
}

export async function openScene(label: string): Promise<Scene> {
  const db = await createTestDatabase(`chaos_${label}`);
  const client = await newClient(db.url);
  let closing: Promise<void> | null = null;
  return {
    db,
    client,
    pool: testPool(db.url, 2),
    logs: logDir(label),
    closeClient: () => (closing ??= client.close()),
  };
}

/** Tears a scene down in the safe order: workers first, then connections, then the database. */
export async function closeScene(scene: Scene | undefined, workers: readonly ChaosWorker[]): Promise<void> {
  await Promise.all(workers.map((w) => w.dispose()));
  if (!scene) return;
  await scene.closeClient();
  await scene.pool.end();
  await scene.db.drop();
  scene.logs.remove();
}

export async function newClient(url: string): Promise<AwaClient> {
  const client = new AwaClient({ connectionString: url, poolSize: 6 });
  await client.migrate();
  return client;
}

/** A seeded generator: the seed is printed (and can be set with AWA_CHAOS_SEED), so a failing run's random
 * draws (batch sizes, priorities, holds, rollbacks, kill pacing) can be repeated; the interleaving cannot. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** The first few of a list, for a failure message. */
export const sample = <T>(xs: readonly T[], n = 20): T[] => xs.slice(0, n);
