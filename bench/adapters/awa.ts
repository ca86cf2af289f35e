import type pg from 'pg';
import { AwaClient, defineJob, WorkerHost, type WorkerOptions } from '../../src/index.js';
import type { BenchArgs, BenchHandler, SystemAdapter, WorkerFleet, WorkerUsage } from '../adapter.js';
import { hostUsage, NO_USAGE } from '../processes/protocol.js';
import { WorkerProcess } from '../processes/worker-processes.js';
import { loadPeer } from '../peer.js';
import { throughPooler } from '../pooler.js';

// Awa as a user runs it: COPY for bulk loads, one WorkerHost with the library's defaults (claim batches
// of 512, completion batches of 512 flushed after 1 ms), handlers called once per job. With `otel`, the
// OpenTelemetry SDK is registered (see bench/otel.ts) before the client and host are built, and removed
// at stop(): the row "awa+otel" is the same run with the SDK recording. With producer 'sql' (the row
// "awa+sql"), single jobs and producer batches go through the SQL producer, insert_job() and insert_jobs()
// (docs/sql.md), as a prepared statement on the client's connection pool, with the same options.

const QUEUE = 'bench';
const KIND = 'bench_noop';
const kind = defineJob<BenchArgs>({ kind: KIND, queue: QUEUE });
/** The kind of every awa bench job, for a scenario that runs it on a host of its own (steps-N). */
export { kind as awaBenchKind };
/** The kind's queue, which the SQL producer is told per job (it has no definition of the kind). */
const SQL_OPTS = JSON.stringify({ queue: QUEUE });

export type AwaProducer = 'client' | 'sql';

export class AwaAdapter implements SystemAdapter {
  readonly label: string;
  readonly schema = 'awa';
  private url = '';
  private client: AwaClient | null = null;
  private host: WorkerHost | null = null;
  private processes: WorkerProcess[] = [];
  private enqueued = 0;
  /** Jobs were enqueued on callers' transactions, which this adapter cannot tell committed from rolled back. */
  private inTransaction = false;
  private cpuAtWorkersStart: NodeJS.CpuUsage | null = null;
  private prunes = 0;
  private uninstallOtel: (() => Promise<void>) | null = null;

  constructor(
    private readonly otel = false,
    private readonly otelSample = 1,
    private readonly shards = 1,
    /** The queue's `prefetch`; undefined: the host's default. */
    private readonly prefetch?: number,
    private readonly producer: AwaProducer = 'client',
    /** A transaction-mode pooler to connect through (--pooler-url), sessions direct; undefined: direct. */
    private readonly poolerUrl?: string,
  ) {
    this.label = otel
      ? otelSample === 1
        ? 'awa+otel'
        : `awa+otel@${otelSample}`
      : producer === 'sql'
        ? 'awa+sql'
        : 'awa';
    if (poolerUrl) this.label = 'awa+pgbouncer';
  }

  /** How the client and the host connect to the run's database `url`: directly, or through the pooler with
   * what needs a session (migrate, LISTEN, the leader lock) on `url`. */
  private connection(
    url: string,
  ): Pick<WorkerOptions, 'connectionString' | 'pooler' | 'sessionConnectionString'> {
    if (!this.poolerUrl) return { connectionString: url };
    return {
      connectionString: throughPooler(this.poolerUrl, url),
      pooler: 'transaction',
      sessionConnectionString: url,
    };
  }

  async setup(url: string): Promise<void> {
    this.url = url;
    if (this.otel) {
      const { installOtelSdk } = await loadPeer('--otel', () => import('../otel.js'));
      this.uninstallOtel = installOtelSdk(this.otelSample);
    }
    this.client = new AwaClient({ ...this.connection(url), schema: this.schema, poolSize: 8 });
    await this.client.migrate();
    if (this.shards > 1) await this.client.setEnqueueShards(QUEUE, this.shards, { create: true });
  }

  async enqueueBulk(
    n: number,
    make: (i: number) => BenchArgs,
    onProgress: (done: number) => void,
    unique = false,
  ) {
    const jobs = (function* () {
      for (let i = 0; i < n; i++)
        yield unique
          ? { kind, args: make(i), options: { unique: { key: `k${i}` } } }
          : { kind, args: make(i) };
    })();
    this.enqueued += (await this.db().copyEnqueue(jobs, { onProgress })).inserted;
  }

  async enqueueBulkInTransaction(client: pg.ClientBase, args: readonly BenchArgs[]): Promise<void> {
    this.inTransaction = true;
    await this.db().copyEnqueue(
      args.map((a) => ({ kind, args: a })),
      { client },
    );
  }

  async enqueueBatch(args: readonly BenchArgs[]): Promise<void> {
    if (this.producer === 'sql') {
      const jobs = JSON.stringify(args.map((a) => ({ kind: KIND, args: a, opts: { queue: QUEUE } })));
      await this.db().pool.query({
        name: 'bench-insert-jobs',
        text: `select job_id from ${this.schema}.insert_jobs($1::jsonb)`,
        values: [jobs],
      });
    } else {
      await this.db().enqueueMany(args.map((a) => ({ kind, args: a })));
    }
    this.enqueued += args.length;
  }

  async enqueueOne(args: BenchArgs): Promise<void> {
    if (this.producer === 'sql') await this.db().pool.query(this.insertJob(args));
    else await this.db().enqueue(kind, args);
    this.enqueued++;
  }

  async enqueueInTransaction(client: pg.ClientBase, args: BenchArgs): Promise<void> {
    this.inTransaction = true;
    if (this.producer === 'sql') await client.query(this.insertJob(args));
    else await this.db().enqueue(kind, args, { client });
  }

  /** One job through insert_job(): prepared once per connection, as the client's own statements are. */
  private insertJob(args: BenchArgs): pg.QueryConfig {
    return {
      name: 'bench-insert-job',
      text: `select job_id from ${this.schema}.insert_job($1, $2::jsonb, $3::jsonb)`,
      values: [KIND, JSON.stringify(args), SQL_OPTS],
    };
  }

  async startWorkers(concurrency: number, handler: BenchHandler): Promise<void> {
    this.cpuAtWorkersStart = process.cpuUsage();
    const host = new WorkerHost({
      ...this.connection(this.url),
      schema: this.schema,
      queues: { [QUEUE]: { concurrency, prefetch: this.prefetch } },
    });
    host.register(kind, (job) => handler(job.args));
    // The leader reports every prune attempt; 'pruned' means a ring slot was truncated (storage reclaimed
    // without VACUUM), the other outcomes say why a slot had to wait.
    host.on('prune', (r) => {
      if (r.outcome === 'pruned') this.prunes++;
    });
    host.on('error', (err) =>
      process.stderr.write(`[awa] ${err instanceof Error ? err.message : String(err)}\n`),
    );
    await host.start();
    this.host = host;
  }

  async spawnWorkerProcesses(processes: number, concurrency: number): Promise<WorkerFleet> {
    const spawned = await Promise.all(
      Array.from({ length: processes }, () =>
        WorkerProcess.spawn({
          url: this.url,
          schema: this.schema,
          queue: QUEUE,
          kind: KIND,
          concurrency,
          prefetch: this.prefetch,
          sleepMs: 0,
          waitForGo: true,
          progressEveryMs: 20,
        }),
      ),
    );
    this.processes = spawned;
    return {
      start: () => spawned.forEach((p) => p.go()),
      completed: () => {
        const crash = spawned.map((p) => p.crash()).find((c) => c !== null);
        if (crash) throw new Error(crash);
        return spawned.reduce((n, p) => n + p.completed, 0);
      },
      usage: () =>
        spawned.reduce(
          (sum, p) => ({
            cpuUs: sum.cpuUs + p.usage.cpuUs,
            claimCalls: sum.claimCalls + p.usage.claimCalls,
            claimMs: sum.claimMs + p.usage.claimMs,
            flushes: sum.flushes + p.usage.flushes,
          }),
          NO_USAGE,
        ),
    };
  }

  workerUsage(): WorkerUsage {
    if (!this.host || !this.cpuAtWorkersStart) return NO_USAGE;
    return hostUsage(this.host.stats, this.cpuAtWorkersStart);
  }

  async pending(): Promise<number> {
    // The host counts a job completed only once its completion batch committed, so this is exact
    // without a query (the query below would add load to the measured run), as long as every job was
    // enqueued here; jobs of callers' transactions may have rolled back, and only the database knows.
    if (this.host && !this.inTransaction) return Math.max(0, this.enqueued - this.host.stats.completed);
    const q = (await this.db().counts()).find((c) => c.queue === QUEUE);
    return q ? q.available + q.running + q.scheduled + q.retryable : 0;
  }

  async depth(): Promise<number> {
    const q = (await this.db().counts()).find((c) => c.queue === QUEUE);
    return q ? q.available : 0;
  }

  async maintenance(): Promise<Record<string, number>> {
    // The ring ledger's generation counts rotations since migrate (the table itself is trimmed).
    const { rows } = await this.db().pool.query<{ g: string }>(
      `select max(generation) as g from ${this.schema}.ring_rotations`,
    );
    return { rotations: Number(rows[0]?.g ?? 0), prunes: this.prunes };
  }

  settings(): Record<string, unknown> {
    const c = this.host?.config;
    return {
      bulk: 'AwaClient.copyEnqueue (COPY, 20,000-row chunks)',
      batch: this.producer === 'sql' ? `select ${this.schema}.insert_jobs($1)` : 'AwaClient.enqueueMany',
      single:
        this.producer === 'sql'
          ? `select ${this.schema}.insert_job($1, $2, '${SQL_OPTS}') (prepared, on AwaClient.pool)`
          : 'AwaClient.enqueue(kind, args)',
      inTransaction:
        this.producer === 'sql'
          ? `insert_job() on the caller's client`
          : 'AwaClient.enqueue(kind, args, { client })',
      claimBatchSize: c?.claimBatchSize ?? 512,
      settleBatchSize: c?.settleBatchSize ?? 512,
      settleFlushMs: c?.settleFlushMs ?? 1,
      pollIntervalMs: c?.pollIntervalMs ?? 200,
      handler: 'one call per job',
      enqueueShards: this.shards,
      prefetch: this.prefetch ?? 'the concurrency (default)',
      otel: this.otel
        ? 'SDK registered: periodic metric reader (5 s), batch span processor, exporters that discard, ' +
          (this.otelSample === 1
            ? 'every span recorded'
            : `root traces sampled at ${this.otelSample} (ParentBased(TraceIdRatioBased))`)
        : 'API only (no SDK)',
      ...(this.processes.length
        ? { processes: this.processes.length, concurrencyPerProcess: this.processes[0]!.cfg.concurrency }
        : {}),
      ...(this.poolerUrl
        ? {
            pooler:
              "transaction (pooler: 'transaction'): client, host and producers through the pooler; " +
              'migrate, LISTEN and the leader lock on sessionConnectionString (direct)',
          }
        : {}),
    };
  }

  async stop(): Promise<void> {
    const processes = this.processes;
    this.processes = [];
    await Promise.all(processes.map((p) => p.stop()));
    const host = this.host;
    this.host = null;
    await host?.stop();
    const client = this.client;
    this.client = null;
    await client?.close();
    const uninstall = this.uninstallOtel;
    this.uninstallOtel = null;
    await uninstall?.();
  }

  private db(): AwaClient {
    if (!this.client) throw new Error('awa adapter used before setup()');
    return this.client;
  }
}
