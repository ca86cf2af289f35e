// Shared machinery of the chaos suite: worker child processes (test/fixtures/chaos-worker.ts), their
// JSON-line logs, and the exact end-of-run checks made from the database and from those logs.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { AwaClient, type JobRecord } from '../../src/index.js';
import type { ChaosLine, ChaosWorkerConfig } from '../fixtures/chaos-jobs.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';

export const FIXTURE = fileURLToPath(new URL('../fixtures/chaos-worker.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export type AttemptLine = Extract<ChaosLine, { event: 'start' | 'end' | 'abort' }>;
export type SettledLine = Extract<ChaosLine, { event: 'settled' }>;
export type RescueLine = Extract<ChaosLine, { event: 'rescue' }>;
export type LeadershipLine = Extract<ChaosLine, { event: 'leadership' }>;

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `cond` until it holds; fails with `what` after `timeoutMs`. */
export async function waitFor(
  what: string,
  cond: () => boolean | Promise<boolean>,
  timeoutMs: number,
  everyMs = 25,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

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

  static async spawn(dir: string, cfg: Omit<ChaosWorkerConfig, 'log'>): Promise<ChaosWorker> {
    const full: ChaosWorkerConfig = { ...cfg, log: join(dir, `${cfg.instanceId}.jsonl`) };
    const proc = spawn(process.execPath, ['--import', 'tsx', FIXTURE, JSON.stringify(full)], {
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
    if (!existsSync(this.cfg.log)) return [];
    return readFileSync(this.cfg.log, 'utf8')
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as ChaosLine);
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

  freeze(): void {
    this.frozen.push([Date.now(), Number.POSITIVE_INFINITY]);
    this.proc.kill('SIGSTOP');
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

export interface ExpectedJob {
  id: string;
  uid: string;
  kind: string;
  /** Terminal state the job must end in; 'failed' only where attempts run out by design. */
  state: 'completed' | 'failed';
  /** Runs of the kind's handler may be abandoned by design (kind deadline): overlap is then allowed. */
  abandonable?: boolean;
}

export interface RunReport {
  jobs: number;
  completed: number;
  failed: number;
  lost: number;
  /** Attempt starts logged by handlers. */
  attemptsLogged: number;
  /** Distinct (job, run_lease) rescued by a leader. */
  rescued: number;
  /** Settlements the fence rejected. */
  staleRejected: number;
  maxAttempt: number;
  violations: string[];
}

export interface VerifyOptions {
  /**
   * Rescue of a process that was neither killed nor frozen is tolerated (e.g. its heartbeats could not
   * reach a restarting server); every other check still applies.
   */
  allowRescueOfLiveWorkers?: boolean;
}

/**
 * The end-of-run checks, from the database (getJob of every job) and from the handlers' own logs:
 * every job terminal in its expected state, none lost (uids counted), no attempt started twice, no two
 * attempts of a job overlapping unless the earlier one's process was dead or frozen (or its kind
 * abandons hung handlers by design), every orphaned attempt rescued, rescued jobs with their attempt
 * counted and a rescue entry in their error history, and every rejected (stale) settlement explained.
 */
export async function verifyRun(
  client: AwaClient,
  expected: readonly ExpectedJob[],
  workers: readonly ChaosWorker[],
  opts: VerifyOptions = {},
): Promise<RunReport> {
  const v: string[] = [];
  const byPid = new Map(workers.map((w) => [w.pid, w]));
  const byInstance = new Map(workers.map((w) => [w.instanceId, w]));
  const starts = new Map<string, AttemptLine[]>();
  const ends = new Map<string, AttemptLine>();
  const settled = new Map<string, SettledLine[]>();
  const rescued = new Map<string, { instanceId: string; reason: string; outcome: string; t: number }>();
  const key = (id: string, lease: number) => `${id}:${lease}`;
  for (const w of workers) {
    for (const l of w.lines()) {
      if (l.event === 'start')
        starts.set(key(l.id, l.runLease), [...(starts.get(key(l.id, l.runLease)) ?? []), l]);
      else if (l.event === 'end') ends.set(key(l.id, l.runLease), l);
      else if (l.event === 'settled')
        settled.set(key(l.id, l.runLease), [...(settled.get(key(l.id, l.runLease)) ?? []), l]);
      else if (l.event === 'rescue')
        for (const r of l.rescued) rescued.set(key(r.jobId, r.runLease), { ...r, t: l.t });
    }
  }
  for (const [k, s] of starts)
    if (s.length > 1)
      v.push(`attempt ${k} started ${s.length} times (pids ${s.map((x) => x.pid).join(', ')})`);

  const records = new Map<string, JobRecord | null>();
  await Promise.all(expected.map(async (j) => records.set(j.id, await client.getJob(j.id))));

  let completed = 0;
  let failed = 0;
  let lost = 0;
  let maxAttempt = 0;
  const uids = new Set<string>();
  const attemptsByJob = new Map<string, AttemptLine[]>();
  for (const s of starts.values())
    for (const a of s) attemptsByJob.set(a.id, [...(attemptsByJob.get(a.id) ?? []), a]);

  for (const j of expected) {
    const rec = records.get(j.id) ?? null;
    if (!rec || (rec.state !== 'completed' && rec.state !== 'failed')) {
      lost++;
      v.push(`job ${j.id} (${j.uid}) is ${rec ? rec.state : 'missing'}, expected ${j.state}`);
      continue;
    }
    if ((rec.args as { uid?: string }).uid === j.uid) uids.add(j.uid);
    else v.push(`job ${j.id} carries uid ${(rec.args as { uid?: string }).uid}, expected ${j.uid}`);
    if (rec.state === 'completed') completed++;
    else failed++;
    if (rec.state !== j.state)
      v.push(`job ${j.id} (${j.uid}, ${j.kind}) ended ${rec.state}, expected ${j.state}`);
    if (rec.state === 'failed' && rec.attempt < rec.maxAttempts && j.state !== 'failed') {
      v.push(`job ${j.id} failed after ${rec.attempt}/${rec.maxAttempts} attempts`);
    }
    maxAttempt = Math.max(maxAttempt, rec.attempt);

    const attempts = (attemptsByJob.get(j.id) ?? []).sort((a, b) => a.t - b.t || a.runLease - b.runLease);
    const final = attempts.find((a) => a.runLease === rec.runLease);
    if (!final)
      v.push(`job ${j.id}: its recorded attempt (lease ${rec.runLease}) was never started by a handler`);
    else if (final.attempt !== rec.attempt)
      v.push(`job ${j.id}: final attempt ${final.attempt} logged, ${rec.attempt} recorded`);
    if (rec.state === 'completed') {
      const fin = ends.get(key(j.id, rec.runLease));
      if (!fin) v.push(`job ${j.id} completed by lease ${rec.runLease}, whose handler never returned`);
      const acceptedCompletions = attempts
        .flatMap((a) => settled.get(key(j.id, a.runLease)) ?? [])
        .filter((s) => s.accepted && s.outcome === 'completed');
      if (acceptedCompletions.length > 1)
        v.push(`job ${j.id}: ${acceptedCompletions.length} completions accepted`);
      if (acceptedCompletions[0] && acceptedCompletions[0].runLease !== rec.runLease) {
        v.push(
          `job ${j.id}: completion of lease ${acceptedCompletions[0].runLease} accepted, yet lease ${rec.runLease} recorded`,
        );
      }
    }
    if (rec.attempt < attempts.length)
      v.push(`job ${j.id}: ${attempts.length} attempts logged, attempt counter ${rec.attempt}`);

    // No overlap: attempt b starts only once attempt a is over, or a's process is dead/frozen, or a's
    // kind abandons hung handlers and the host settled a before b started.
    for (let i = 0; i + 1 < attempts.length; i++) {
      const a = attempts[i]!;
      const b = attempts[i + 1]!;
      const aEnd = ends.get(key(a.id, a.runLease));
      if (aEnd && aEnd.t <= b.t) continue;
      const owner = byPid.get(a.pid);
      if (owner?.deadOrFrozenAt(b.t)) continue;
      // A hung handler of an abandonable kind: its host settled it at the kind deadline, or the leader
      // rescued it at the queue deadline, before the next attempt started.
      const aSettled = settled.get(key(a.id, a.runLease))?.find((s) => s.t <= b.t);
      if (j.abandonable && aSettled && aSettled.outcome !== 'completed') continue;
      const aRescued = rescued.get(key(a.id, a.runLease));
      if (j.abandonable && aRescued && aRescued.reason === 'deadline_exceeded' && aRescued.t <= b.t) continue;
      v.push(
        `job ${j.id}: attempt ${a.attempt} (lease ${a.runLease}, pid ${a.pid}) still running when attempt ${b.attempt} started (pid ${b.pid})`,
      );
    }
    // An attempt that never ended in a process that was killed must have been rescued.
    for (const a of attempts) {
      const owner = byPid.get(a.pid);
      if (
        !ends.has(key(a.id, a.runLease)) &&
        owner?.killedAt != null &&
        !j.abandonable &&
        !rescued.has(key(a.id, a.runLease))
      ) {
        v.push(`job ${j.id}: attempt ${a.attempt} orphaned by killed pid ${a.pid} was never rescued`);
      }
    }
  }
  for (const j of expected)
    if (!uids.has(j.uid) && records.get(j.id)) v.push(`uid ${j.uid} missing from terminal jobs`);

  // Rescues: only of dead/frozen processes (unless tolerated), with the attempt counted and recorded.
  for (const [k, r] of rescued) {
    const [id, lease] = k.split(':') as [string, string];
    const rec = records.get(id);
    if (rec === undefined) continue; // not one of this run's jobs
    const owner = byInstance.get(r.instanceId);
    if (!opts.allowRescueOfLiveWorkers && r.reason === 'worker_lost') {
      const damaged = owner !== undefined && (owner.killedAt !== null || owner.frozen.length > 0);
      if (!damaged) v.push(`attempt ${k} rescued from live worker ${r.instanceId}`);
    }
    if (!rec) continue;
    if (r.outcome === 'retry' && rec.runLease <= Number(lease))
      v.push(`job ${id} rescued (lease ${lease}) but never re-run`);
    if (r.outcome === 'retry' && rec.attempt < 2)
      v.push(`job ${id} rescued yet its attempt counter is ${rec.attempt}`);
    if (!rec.meta?.errors?.some((e) => /rescued/i.test(e.error)))
      v.push(`job ${id} rescued without a rescue entry in its error history`);
  }

  // Stale settlements: each rejected one was rescued first, or (connection loss) was the very attempt the
  // database recorded — its first flush committed but the answer was lost, and the replay found it closed.
  let staleRejected = 0;
  for (const [k, list] of settled) {
    for (const s of list) {
      if (s.accepted) continue;
      const rec = records.get(s.id);
      if (rec === undefined) continue;
      staleRejected++;
      const replayOfRecorded = rec !== null && rec.runLease === s.runLease && list.length > 1;
      if (
        !rescued.has(k) &&
        !replayOfRecorded &&
        !(rec && rec.runLease === s.runLease && rec.state === 'completed')
      ) {
        v.push(`settlement of ${k} (${s.outcome}) rejected, yet the attempt was never rescued`);
      }
    }
  }

  let attemptsLogged = 0;
  for (const s of starts.values()) attemptsLogged += s.length;
  return {
    jobs: expected.length,
    completed,
    failed,
    lost: lost + (expected.length - lost - uids.size),
    attemptsLogged,
    rescued: [...rescued.keys()].filter((k) => records.has(k.split(':')[0]!)).length,
    staleRejected,
    maxAttempt,
    violations: v,
  };
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
        const done = counts.reduce((n, c) => n + c.completed + c.failed + c.cancelled, 0);
        last = JSON.stringify(counts);
        return done >= total;
      },
      timeoutMs,
      100,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; counts: ${last}`);
  }
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
