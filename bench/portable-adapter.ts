// The portable adapter: a long-running awa-node process for external cross-system harnesses that speak
// the JSONL protocol described in bench/PORTABLE-ADAPTER.md. Configured by environment only; stdout is
// protocol, stderr is logs.
//
//   DATABASE_URL=postgres://… PRODUCER_RATE=500 WORKER_COUNT=64 npx tsx bench/portable-adapter.ts

import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { AwaClient, defineJob, WorkerHost } from '../src/index.js';
import { schemaTables } from './database.js';
import { sleep } from './pace.js';
import { readConfig, type PortableConfig } from './portable/config.js';
import { log, metric, onStdoutClosed, setInstanceId, SYSTEM, writeLine } from './portable/emit.js';
import { Producer, type PortableArgs } from './portable/producer.js';
import { RollingHistogram } from './portable/window.js';

const SCHEMA = 'awa';
const QUEUE = 'portable';
const kind = defineJob<PortableArgs>({ kind: 'portable_job', queue: QUEUE });

/** Retries an operation until the database answers: the adapter may start before PostgreSQL does. */
async function untilItWorks<T>(what: string, fn: () => Promise<T>): Promise<T> {
  for (let delay = 250; ; delay = Math.min(delay * 2, 5_000)) {
    try {
      return await fn();
    } catch (err) {
      log(`${what} failed, retrying in ${delay} ms: ${err instanceof Error ? err.message : String(err)}`);
      await sleep(delay);
    }
  }
}

async function describe(client: AwaClient): Promise<void> {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  const { rows } = await client.pool.query<{ db: string; v: number | null }>(
    `select current_database() as db, (select max(version) from ${SCHEMA}.schema_version) as v`,
  );
  writeLine({
    kind: 'descriptor',
    system: SYSTEM,
    // Schema-qualified, as the harness reads each one's statistics by name.
    event_tables: (await schemaTables(client.pool, SCHEMA)).map((t) => `${SCHEMA}.${t}`),
    extensions: [],
    version: pkg.version,
    schema_version: rows[0]!.v,
    db_name: rows[0]!.db,
    started_at: new Date().toISOString(),
  });
}

/** A host per start attempt: a host whose start() failed cannot be started again. */
async function startHost(
  cfg: PortableConfig,
  claim: RollingHistogram,
  endToEnd: RollingHistogram,
): Promise<WorkerHost> {
  return untilItWorks('worker start', async () => {
    const host = new WorkerHost({
      connectionString: cfg.databaseUrl,
      schema: SCHEMA,
      // Unique per process, never reused by a restarted replica: the attempts a killed process held are
      // rescued once its instance stops heartbeating, which a successor under the same id would prevent.
      instanceId: `portable-${cfg.instanceId}-${randomUUID().slice(0, 8)}`,
      ...(cfg.completedRetentionMs === null ? {} : { completedRetentionMs: cfg.completedRetentionMs }),
      queues: { [QUEUE]: { concurrency: cfg.workerCount } },
      // SIGTERM must end within 5 s: let running jobs finish for 2 s at most (the rest are rescued).
      shutdownTimeoutMs: 2_000,
    });
    // produced_at_ms of jobs between handler start and settlement, for end-to-end latency.
    const producedAt = new Map<string, number>();
    host.register(kind, async (job) => {
      claim.recordMs(Date.now() - job.args.produced_at_ms);
      producedAt.set(job.id, job.args.produced_at_ms);
      if (cfg.workMs > 0) await sleep(cfg.workMs);
    });
    host.on('settled', (s, accepted) => {
      const at = producedAt.get(s.jobId);
      if (at === undefined) return;
      producedAt.delete(s.jobId);
      if (accepted) endToEnd.recordMs(Date.now() - at);
    });
    host.on('rescue', (rescued) => {
      const from = [...new Set(rescued.map((r) => r.instanceId))].join(', ');
      log(`rescued ${rescued.length} attempt(s) of ${from}`);
    });
    let lastLog = 0;
    host.on('error', (err) => {
      if (Date.now() - lastLog < 2_000) return; // a lost database produces an error per attempt
      lastLog = Date.now();
      log(`worker: ${err instanceof Error ? err.message : String(err)}`);
    });
    await host.start();
    return host;
  });
}

async function main(): Promise<void> {
  const cfg = readConfig();
  setInstanceId(cfg.instanceId);
  // Until the worker host runs there is nothing to flush: a signal, or the harness closing stdout, just
  // ends the process (exit 0). The full shutdown replaces this below.
  let shutdown = (_why: string): void => process.exit(0);
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  onStdoutClosed(() => shutdown('stdout closed'));
  log(
    `scenario ${cfg.scenario}, mode ${cfg.harnessPacing ? 'harness pacing' : cfg.producerMode}, workers ${cfg.workerCount}`,
  );
  const client = new AwaClient({ connectionString: cfg.databaseUrl, schema: SCHEMA, poolSize: 4 });
  // Several replicas may migrate at once: migrate() serialises them under an advisory lock.
  await untilItWorks('migrate', () => client.migrate());
  await untilItWorks('describe', () => describe(client));

  const claim = new RollingHistogram(30);
  const endToEnd = new RollingHistogram(30);
  const host = await startHost(cfg, claim, endToEnd);
  const producer = new Producer(cfg, client, kind);
  const producing = producer.run();

  if (cfg.harnessPacing) {
    createInterface({ input: process.stdin }).on('line', (line) => {
      const m = /^ENQUEUE\s+(\d+)\s*$/.exec(line.trim());
      if (m) producer.requestHarness(Number(m[1]));
      else if (line.trim()) log(`ignored stdin line: ${line}`);
    });
  }

  const timers: NodeJS.Timeout[] = [];
  if (cfg.rateControlFile) {
    const file = cfg.rateControlFile;
    const reread = async () => {
      const rate = Number((await readFile(file, 'utf8').catch(() => '')).trim());
      if (Number.isFinite(rate) && rate >= 0) producer.setRate(rate);
    };
    await reread();
    timers.push(setInterval(() => void reread(), 1_000));
  }

  let depth: number | null = null;
  const readDepth = async () => {
    try {
      const q = (await client.counts()).find((c) => c.queue === QUEUE);
      depth = q ? q.available : 0;
      producer.observeDepth(depth);
    } catch {
      depth = null; // database unreachable: report no depth rather than a stale one
    }
  };
  if (cfg.producerMode === 'depth-target' && !cfg.harnessPacing)
    timers.push(setInterval(() => void readDepth(), 200));

  // Metric ticks on wall-clock multiples of SAMPLE_EVERY_S, so replicas and systems line up. Counts are
  // this replica's own: jobs its producer committed, jobs its worker host completed (committed). The
  // queue depth is the same for every replica, so only instance 0 reports it (the harness's convention
  // for observer metrics).
  const observer = cfg.instanceId === 0;
  const periodMs = cfg.sampleEveryS * 1000;
  let last = { at: Date.now(), enqueued: 0, completed: 0 };
  const tick = async (at: Date) => {
    if (observer) await readDepth();
    const windowS = Math.max((at.getTime() - last.at) / 1000, 1e-3);
    const [c50, c95, c99] = claim.percentilesMs([50, 95, 99], at.getTime());
    const [e50, e99] = endToEnd.percentilesMs([50, 99], at.getTime());
    metric(at, 'claim_p50_ms', c50!, claim.windowS);
    metric(at, 'claim_p95_ms', c95!, claim.windowS);
    metric(at, 'claim_p99_ms', c99!, claim.windowS);
    metric(at, 'end_to_end_p50_ms', e50!, endToEnd.windowS);
    metric(at, 'end_to_end_p99_ms', e99!, endToEnd.windowS);
    metric(at, 'enqueue_rate', (producer.enqueued - last.enqueued) / windowS, round(windowS));
    metric(at, 'completion_rate', (host.stats.completed - last.completed) / windowS, round(windowS));
    if (observer) metric(at, 'queue_depth', depth, 0);
    last = { at: at.getTime(), enqueued: producer.enqueued, completed: host.stats.completed };
  };
  let tickTimer: NodeJS.Timeout | null = null;
  let shuttingDown = false;
  const schedule = () => {
    if (shuttingDown) return; // a tick that was running when shutdown began must not schedule another
    const next = Math.ceil((Date.now() + 1) / periodMs) * periodMs;
    tickTimer = setTimeout(() => void tick(new Date(next)).finally(schedule), next - Date.now());
  };
  schedule();

  shutdown = (signal: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log(`${signal}: flushing and exiting`);
    // The contract is exit 0 within 5 s whatever the database is doing.
    setTimeout(() => process.exit(0), 4_800).unref();
    if (tickTimer) clearTimeout(tickTimer);
    for (const t of timers) clearInterval(t);
    producer.stop();
    void (async () => {
      // Finish the work first, then report the partial window since the last tick, so the totals
      // include the last insert and the completions the host flushes while stopping.
      await Promise.race([producing, sleep(500)]);
      await Promise.race([host.stop(), sleep(2_500)]).catch(() => {});
      await Promise.race([tick(new Date()), sleep(1_000)]);
      await Promise.race([client.close(), sleep(300)]).catch(() => {});
      process.exit(0);
    })();
  };
}

function round(n: number): number {
  return Math.round(n * 1000) / 1000;
}

main().catch((err: unknown) => {
  log(`fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exit(1);
});
