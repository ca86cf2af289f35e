// The four-process proof of flow control (issue 36), shared by the chaos test
// (test/chaos/flow-control-fleet.test.ts) and the `limits` bench scenario (bench/scenarios/limits.ts): a fleet of host
// processes (bench/limits/host.ts) one can SIGKILL and replace, and what is measured from the database
// while it runs: running attempts per key (sampled), and every start the database recorded (claim receipts,
// read as they come, before the ring prunes them). The window arithmetic lives in windows.ts.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { processCpuMs } from '../server-cpu.js';
import type { LimitedHostConfig, LimitedLine } from './jobs.js';

// Next to this module: host.ts run through tsx from source, host.js once built.
const FROM_SOURCE = import.meta.url.endsWith('.ts');
const ENTRY = fileURLToPath(new URL(`./host.${FROM_SOURCE ? 'ts' : 'js'}`, import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Complete lines of a log another process appends to (the text after the last newline is not a line yet). */
function readLines(path: string): LimitedLine[] {
  if (!existsSync(path)) return [];
  const text = readFileSync(path, 'utf8');
  return text
    .slice(0, text.lastIndexOf('\n') + 1)
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as LimitedLine);
}

/** One host process of the fleet. */
export class LimitedHost {
  killedAt: number | null = null;
  private stopping = false;
  private stderr = '';
  readonly exited: Promise<number | null>;

  private constructor(
    readonly cfg: LimitedHostConfig,
    private readonly proc: ChildProcess,
  ) {
    proc.stderr?.on('data', (d: Buffer) => (this.stderr = (this.stderr + d.toString()).slice(-4_000)));
    proc.stdout?.on('data', () => {});
    this.exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  }

  static async spawn(cfg: LimitedHostConfig): Promise<LimitedHost> {
    const args = [...(FROM_SOURCE ? ['--import', 'tsx'] : []), ENTRY, JSON.stringify(cfg)];
    const proc = spawn(process.execPath, args, {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const host = new LimitedHost(cfg, proc);
    let exit: number | null | undefined;
    void host.exited.then((code) => (exit = code));
    const deadline = Date.now() + 60_000;
    while (!host.lines().some((l) => l.event === 'ready')) {
      if (exit !== undefined) throw new Error(`host ${cfg.instanceId} exited with ${exit}: ${host.stderr}`);
      if (Date.now() > deadline)
        throw new Error(`host ${cfg.instanceId} not ready after 60 s: ${host.stderr}`);
      await sleep(25);
    }
    return host;
  }

  get instanceId(): string {
    return this.cfg.instanceId;
  }

  lines(): LimitedLine[] {
    return readLines(this.cfg.log);
  }

  /** SIGSTOP, resolved once the process is stopped: what it wrote to the database can no longer change. */
  async freeze(): Promise<void> {
    this.proc.kill('SIGSTOP');
    const pid = this.proc.pid!;
    const state = () => {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    };
    while (state() !== 'T') await sleep(1);
  }

  thaw(): void {
    this.proc.kill('SIGCONT');
  }

  /** CPU milliseconds the process (all its threads) has used so far; null once it has exited. */
  cpuMs(): Promise<number | null> {
    return processCpuMs(this.proc.pid!);
  }

  async kill(): Promise<void> {
    this.killedAt = Date.now();
    this.proc.kill('SIGKILL');
    await this.exited;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill('SIGTERM');
    await this.exited;
  }

  async dispose(): Promise<void> {
    this.stopping = true;
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill('SIGKILL');
    await this.exited;
  }

  /** Why the process died when nobody killed or stopped it, or null. */
  crash(): string | null {
    if (this.killedAt !== null || this.stopping) return null;
    if (this.proc.exitCode === null && this.proc.signalCode === null) return null;
    return `host ${this.instanceId} died on its own (${this.proc.exitCode ?? this.proc.signalCode}): ${this.stderr.slice(-1_500)}`;
  }
}

/** A fleet of host processes on one schema, each with the same queues, in a log directory of its own. */
export class LimitedFleet {
  readonly hosts: LimitedHost[] = [];
  private readonly dir = mkdtempSync(join(tmpdir(), 'awa-limits-'));
  private spawned = 0;

  constructor(private readonly base: Omit<LimitedHostConfig, 'instanceId' | 'log'>) {}

  /** Starts `n` more hosts side by side; resolves once each is ready. */
  async grow(n: number): Promise<LimitedHost[]> {
    const ids = Array.from({ length: n }, () => `limits-${++this.spawned}`);
    const started = await Promise.all(
      ids.map((instanceId) =>
        LimitedHost.spawn({ ...this.base, instanceId, log: join(this.dir, `${instanceId}.jsonl`) }),
      ),
    );
    this.hosts.push(...started);
    return started;
  }

  /** CPU milliseconds the live hosts have used so far, together. */
  async hostsCpuMs(): Promise<number> {
    const each = await Promise.all(this.alive().map((h) => h.cpuMs()));
    return each.reduce<number>((sum, ms) => sum + (ms ?? 0), 0);
  }

  alive(): LimitedHost[] {
    return this.hosts.filter((h) => h.killedAt === null);
  }

  lines(): LimitedLine[] {
    return this.hosts.flatMap((h) => h.lines());
  }

  /** Throws with the stderr of any host that died without being killed or stopped. */
  assertNoCrash(): void {
    const crashes = this.hosts.map((h) => h.crash()).filter((c) => c !== null);
    if (crashes.length > 0) throw new Error(crashes.join('\n---\n'));
  }

  /** Handler-clock starts of `queue` (of the jobs `ids`, if given), by key: [ms…] (not sorted). */
  handlerStarts(queue: string, ids?: ReadonlySet<string>): Map<string, number[]> {
    const byKey = new Map<string, number[]>();
    for (const l of this.lines())
      if (l.event === 'starts')
        for (const [id, , key, q, at] of l.starts)
          if (q === queue && (!ids || ids.has(id))) push(byKey, key, at);
    return byKey;
  }

  /** How long after its start in the database (`starts`, the run's) each job's handler began on its host: the
   * first handler start of each job, in ms. */
  handlerLags(queue: string, starts: readonly DbStart[]): number[] {
    const at = new Map(starts.filter((s) => s.queue === queue).map((s) => [s.jobId, s.at]));
    const lags = new Map<string, number>();
    for (const l of this.lines())
      if (l.event === 'starts')
        for (const [id, , , q, handlerAt] of l.starts) {
          const dbAt = at.get(id);
          if (q === queue && dbAt !== undefined && !lags.has(id)) lags.set(id, handlerAt - dbAt);
        }
    return [...lags.values()];
  }

  /** Job ids the leader rescued, with how many times. */
  rescued(): Map<string, number> {
    return countIds(this.lines().flatMap((l) => (l.event === 'rescue' ? l.rescued.map((r) => r.jobId) : [])));
  }

  /** Job ids a host handed back unstarted, with how many times: receipt members that did not run. */
  handedBack(): Map<string, number> {
    return countIds(this.lines().flatMap((l) => (l.event === 'handback' ? l.jobIds : [])));
  }

  /** Errors the hosts reported. */
  errors(): string[] {
    return this.lines().flatMap((l) => (l.event === 'error' ? [l.message] : []));
  }

  async stop(): Promise<void> {
    await Promise.all(this.alive().map((h) => h.stop()));
  }

  async dispose(): Promise<void> {
    await Promise.all(this.hosts.map((h) => h.dispose()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const xs = m.get(k);
  if (xs) xs.push(v);
  else m.set(k, [v]);
}

/** How many times each id occurs. */
export function countIds(ids: readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  return counts;
}

/** Samples, as often as it can (at most every `everyMs`), the running attempts per key of some queues from the
 * jobs view: the database's own answer, not the limits' bookkeeping. */
export class RunningSampler {
  /** Most running attempts of one key seen in one sample, per queue. */
  readonly maxPerKey = new Map<string, number>();
  /** Most running attempts of the whole queue seen in one sample. */
  readonly maxPerQueue = new Map<string, number>();
  /** Per queue: how many samples had their busiest key at n running attempts, by n. */
  readonly busiestKey = new Map<string, Record<number, number>>();
  samples = 0;
  private running = true;
  private readonly done: Promise<void>;

  constructor(
    private readonly client: pg.ClientBase,
    schema: string,
    queues: readonly string[],
    everyMs = 20,
  ) {
    const sql = `select queue, args->>'tenant' as key, count(*)::int as n
                   from ${schema}.jobs where state = 'running' and queue = any($1) group by 1, 2`;
    this.done = (async () => {
      while (this.running) {
        const t = Date.now();
        // Named, so it is planned once per connection, not per sample: planning the jobs view took longer than
        // running it, and at this cadence the sampler was a core's worth of load beside the drain it measures.
        const { rows } = await this.client.query<{ queue: string; key: string; n: number }>({
          name: 'limits-running-sample',
          text: sql,
          values: [queues],
        });
        this.samples++;
        const top = new Map<string, number>();
        const total = new Map<string, number>();
        for (const r of rows) {
          top.set(r.queue, Math.max(top.get(r.queue) ?? 0, r.n));
          total.set(r.queue, (total.get(r.queue) ?? 0) + r.n);
        }
        for (const [q, n] of top) {
          this.maxPerKey.set(q, Math.max(this.maxPerKey.get(q) ?? 0, n));
          const hist = this.busiestKey.get(q) ?? {};
          hist[n] = (hist[n] ?? 0) + 1;
          this.busiestKey.set(q, hist);
        }
        for (const [q, n] of total) this.maxPerQueue.set(q, Math.max(this.maxPerQueue.get(q) ?? 0, n));
        await sleep(Math.max(0, everyMs - (Date.now() - t)));
      }
    })();
    this.done.catch(() => {}); // reported by stop()
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

/** One start the database recorded: a member of a claim receipt that ran (not sent to the gate by its claim). */
export interface DbStart {
  queue: string;
  key: string;
  jobId: string;
  /** The claim's time (claim_batches.claimed_at; a limited claim's is the moment it decided), epoch ms with µs
   * in the fraction. */
  at: number;
  /** The host that claimed it. */
  instance: string;
  /** Its receipt's batch id: a limited queue's claims take them under the queue's limits lock, so their order
   * is the order in which the claims decided. */
  batch: bigint;
}

/**
 * Collects every start the database records for some queues, reading the claim receipts every `everyMs`
 * (a receipt is truncated when the ring prunes its slot, long after it is read here). A member a limited
 * claim sent to the gate is not a start: that claim closed it in its own transaction, a 'settled' closure of
 * the same receipt at the same time (any other closure is a later transaction).
 */
export class StartsCollector {
  /** Receipts read (slot:batch): a receipt's members are all visible once it is. */
  private readonly seen = new Set<string>();
  readonly starts: DbStart[] = [];
  /** Members their claim sent to the gate instead (not starts), for a run's diagnostics. */
  readonly gated: DbStart[] = [];
  /** Members whose ready row was gone when read (their key unknown); expected 0. */
  unreadable = 0;
  private watermark = 0;
  private running = true;
  private readonly done: Promise<void>;
  private readonly receiptsSql: string;
  private readonly membersSql: string;

  constructor(
    private readonly client: pg.ClientBase,
    schema: string,
    private readonly queues: readonly string[],
    /** Epoch ms: receipts claimed before are not read (an earlier run's on the same queues). */
    private readonly sinceMs = 0,
    everyMs = 250,
  ) {
    // Two reads: the receipts of the last 10 s (a few hundred rows), then the members of those not read yet.
    // Reading every member of the last 10 s each time cost about a quarter of a second per read, a load that
    // grew with the run and weighed on the drain being measured.
    this.receiptsSql = `
      select b.slot, b.batch_id::text as batch
        from ${schema}.claim_batches b
        join ${schema}.lanes l on l.lane_id = b.lane_id
       where l.queue = any($1) and b.claimed_at >= to_timestamp($2 / 1000.0)`;
    this.membersSql = `
      select b.slot, b.batch_id::text as batch, m.idx,
             extract(epoch from b.claimed_at) * 1000 as at, l.queue,
             r.args->>'tenant' as key, r.job_id::text as job_id, b.instance_id as instance,
             exists (select 1 from ${schema}.closure_batches c
                      where c.slot = b.slot and c.batch_id = b.batch_id and c.outcome = 'settled'
                        and c.closed_at = b.claimed_at and c.idxs @> m.idx) as gated
        from unnest($1::smallint[], $2::bigint[]) w(slot, batch_id)
        join ${schema}.claim_batches b on b.slot = w.slot and b.batch_id = w.batch_id
        join ${schema}.lanes l on l.lane_id = b.lane_id
        cross join lateral ${schema}.receipt_members(b.slot, b.batch_id) m
        left join ${schema}.ready_entries r
               on r.slot = m.ready_slot and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq`;
    this.done = (async () => {
      while (this.running) {
        await this.read();
        await sleep(everyMs);
      }
    })();
    this.done.catch(() => {}); // reported by stop()
  }

  private async read(): Promise<void> {
    // A claim commits after its transaction time: read back 10 s behind the newest start seen.
    const receipts = await this.client.query<{ slot: number; batch: string }>({
      name: 'limits-starts-receipts',
      text: this.receiptsSql,
      values: [this.queues, Math.max(this.sinceMs, this.watermark - 10_000)],
    });
    const fresh = receipts.rows.filter((r) => !this.seen.has(`${r.slot}:${r.batch}`));
    if (fresh.length === 0) return;
    const { rows } = await this.client.query<{
      slot: number;
      batch: string;
      idx: number;
      at: number;
      queue: string;
      key: string | null;
      job_id: string | null;
      instance: string;
      gated: boolean;
    }>({
      name: 'limits-starts-members',
      text: this.membersSql,
      values: [fresh.map((r) => r.slot), fresh.map((r) => r.batch)],
    });
    // A receipt is marked read by its members' rows (one with no members, positions passed only, is listed
    // again on each read, at the cost of a row).
    for (const r of rows) {
      this.seen.add(`${r.slot}:${r.batch}`);
      if (r.job_id === null || r.key === null) {
        this.unreadable++;
        continue;
      }
      const at = Number(r.at);
      this.watermark = Math.max(this.watermark, at);
      const member = {
        queue: r.queue,
        key: r.key,
        jobId: r.job_id,
        at,
        instance: r.instance,
        batch: BigInt(r.batch),
      };
      if (r.gated) this.gated.push(member);
      else this.starts.push(member);
    }
  }

  /** Stops and reads once more: every receipt committed so far is in. */
  async stop(): Promise<DbStart[]> {
    this.running = false;
    await this.done;
    await this.read();
    return this.starts;
  }

  /** Start times of `queue`, by key. */
  byKey(queue: string): Map<string, number[]> {
    const m = new Map<string, number[]>();
    for (const s of this.starts) if (s.queue === queue) push(m, s.key, s.at);
    return m;
  }
}

/** A client for the samplers, its errors swallowed (a sampler's query fails loudly on its own). */
export async function samplerClient(url: string, name: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: name });
  client.on('error', () => {});
  await client.connect();
  return client;
}
