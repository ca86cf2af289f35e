import type pg from 'pg';
import type { BenchArgs, WorkerUsage } from '../adapter.js';
import { benchClient } from '../database.js';
import { LatencyHistogram } from '../latency-histogram.js';
import { nowMs, sleep } from '../pace.js';
import { round, type Scenario, type ScenarioOptions } from '../scenario.js';
import { ServerCpu } from '../server-cpu.js';

// Mixed: what a worker host meets in production. Workers run from the start; --long jobs take permits and
// keep them for the whole run; --producers application producers enqueue one job per transaction at a steady
// --rate in all (each on a connection of its own, a --rollback fraction of them rolling back); then a bulk
// load of --jobs jobs commits in ONE transaction on the system's bulk path (awa: COPY; the peers: their
// bulk insert functions on the same client), while the producers go on. The clock runs from that commit
// until the handlers ran every bulk job and the database says nothing is left but the long jobs (the
// producers stop once the bulk jobs have run). Jobs are told apart by their sequence number: long jobs are
// negative, the producers' start at SINGLE_BASE. The p50/p99 columns are the pickup of the producers' jobs
// enqueued from the bulk load's start to its end (handler start − the producer's clock before BEGIN).
// With --producers 0 it is the same run without them: the mixed drain is read against that.

const SINGLE_BASE = 1_000_000_000;
/** Producers run this long before the bulk load starts (connections and plans warm, not recorded). */
const WARMUP_MS = 1_000;
const LONG_START_TIMEOUT_MS = 30_000;
const SETTLE_TIMEOUT_MS = 60_000;

export const mixedScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile'],
  async run({ adapter, url, appUrl, opts, progress }) {
    let releaseLong!: () => void;
    const longReleased = new Promise<void>((resolve) => (releaseLong = resolve));
    const pickup = new LatencyHistogram();
    const counts = { long: 0, bulk: 0, singles: 0 };
    let recordFrom = Infinity;
    let recordUntil = Infinity;
    await adapter.startWorkers(
      opts.concurrency,
      async (args: BenchArgs) => {
        if (args.i < 0) {
          counts.long++;
          return longReleased;
        }
        if (args.i >= SINGLE_BASE) {
          counts.singles++;
          if (args.t >= recordFrom && args.t <= recordUntil) pickup.recordMs(nowMs() - args.t);
        } else counts.bulk++;
        if (opts.handlerMs > 0) await sleep(opts.handlerMs);
      },
      opts.longJobs,
    );
    const producers = new Producers(adapter, appUrl, opts);
    const bulkClient = benchClient(appUrl, 'bench-bulk');
    try {
      for (let l = 1; l <= opts.longJobs; l++) await adapter.enqueueOne({ i: -l, t: nowMs() });
      await until(() => counts.long === opts.longJobs, LONG_START_TIMEOUT_MS, 'the long jobs to start');
      await producers.start();
      await sleep(opts.producers > 0 ? WARMUP_MS : 0);

      const args = Array.from({ length: opts.jobs }, (_, i) => ({ i, t: nowMs() }));
      const serverCpu = await ServerCpu.open(url);
      await bulkClient.connect();
      recordFrom = nowMs();
      const loadStart = performance.now();
      await bulkClient.query('begin');
      await adapter.enqueueBulkInTransaction(bulkClient, args);
      await bulkClient.query('commit');
      const t0 = performance.now();
      const usage0 = adapter.workerUsage?.();
      const cpu0 = { server: await serverCpu?.totalMs(), node: process.cpuUsage() };
      const bar = progress(`mixed ${adapter.label}`, opts.jobs);
      while (counts.bulk < opts.jobs) {
        bar.update(counts.bulk);
        await sleep(5);
      }
      recordUntil = nowMs();
      await producers.stop();
      await until(
        () => counts.singles >= producers.committed,
        SETTLE_TIMEOUT_MS,
        "the producers' jobs to run",
      );
      const settleBy = performance.now() + SETTLE_TIMEOUT_MS;
      while ((await adapter.pending()) > opts.longJobs) {
        if (performance.now() > settleBy)
          throw new Error(`${adapter.label}: jobs left unsettled after the drain`);
        await sleep(10);
      }
      const seconds = (performance.now() - t0) / 1000;
      const nodeCpu = process.cpuUsage(cpu0.node);
      const serverMs = serverCpu ? (await serverCpu.totalMs()) - cpu0.server! : null;
      bar.finish(counts.bulk);
      const claims = usage0 ? claimCost(usage0, adapter.workerUsage!(), opts.jobs + producers.committed) : {};
      return {
        jobs: opts.jobs,
        seconds: round(seconds, 3),
        jobsPerSec: Math.round(opts.jobs / seconds),
        ...pickup.summaryMs(),
        extra: {
          bulkLoadSeconds: round((t0 - loadStart) / 1000, 3),
          producers: opts.producers,
          offeredRate: opts.producers > 0 ? opts.rate : 0,
          committed: producers.committed,
          rolledBack: producers.rolledBack,
          producerErrors: producers.errors,
          pickupSamples: pickup.count,
          longJobs: opts.longJobs,
          handlerMs: opts.handlerMs,
          ...claims,
          // Per bulk job, over the drain: this process's CPU (workers, producers and harness) and the server's.
          nodeCpuUsPerJob: round((nodeCpu.user + nodeCpu.system) / opts.jobs, 1),
          ...(serverMs === null ? {} : { pgCpuUsPerJob: round((serverMs * 1000) / opts.jobs, 1) }),
        },
      };
    } finally {
      await producers.stop();
      releaseLong();
      await bulkClient.end().catch(() => {});
    }
  },
};

/** Claim calls between two usage readings, what each took on average, and the jobs each took. */
function claimCost(before: WorkerUsage, after: WorkerUsage, jobs: number) {
  const calls = after.claimCalls - before.claimCalls;
  return {
    claimCalls: calls,
    msPerClaim: round((after.claimMs - before.claimMs) / Math.max(1, calls), 2),
    jobsPerClaim: round(jobs / Math.max(1, calls), 1),
  };
}

async function until(done: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const by = performance.now() + timeoutMs;
  while (!done()) {
    if (performance.now() > by) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(5);
  }
}

/** The application's producers: each on its own connection, one job per transaction, at an even share of
 * the rate; a fraction of the transactions roll back (chosen in turn, not at random, so every run and every
 * system rolls back the same ones). */
class Producers {
  committed = 0;
  rolledBack = 0;
  errors = 0;
  private clients: pg.Client[] = [];
  private loops: Promise<void>[] = [];
  private running = false;
  private next = SINGLE_BASE;

  constructor(
    private readonly adapter: { enqueueInTransaction(c: pg.ClientBase, a: BenchArgs): Promise<void> },
    private readonly url: string,
    private readonly opts: ScenarioOptions,
  ) {}

  async start(): Promise<void> {
    for (let p = 0; p < this.opts.producers; p++) {
      const client = benchClient(this.url, 'bench-producer');
      await client.connect();
      this.clients.push(client);
    }
    this.running = true;
    const everyMs = (this.opts.producers * 1000) / this.opts.rate;
    this.loops = this.clients.map((c, p) => this.produce(c, everyMs, (p * everyMs) / this.opts.producers));
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    this.loops = [];
    const clients = this.clients;
    this.clients = [];
    await Promise.all(clients.map((c) => c.end().catch(() => {})));
  }

  private async produce(client: pg.Client, everyMs: number, offsetMs: number): Promise<void> {
    const rollbackEvery = this.opts.rollback > 0 ? Math.round(1 / this.opts.rollback) : 0;
    let due = performance.now() + offsetMs;
    while (this.running) {
      await sleep(Math.max(0, due - performance.now()));
      if (!this.running) break;
      due += everyMs;
      const i = this.next++;
      const rollback = rollbackEvery > 0 && (i - SINGLE_BASE) % rollbackEvery === rollbackEvery - 1;
      try {
        await client.query('begin');
        await this.adapter.enqueueInTransaction(client, { i, t: nowMs() });
        await client.query(rollback ? 'rollback' : 'commit');
        if (rollback) this.rolledBack++;
        else this.committed++;
      } catch {
        this.errors++;
        await client.query('rollback').catch(() => {});
      }
    }
  }
}
