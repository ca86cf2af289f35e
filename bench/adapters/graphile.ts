import type * as Graphile from 'graphile-worker';
import type { Logger, Runner, WorkerUtils } from 'graphile-worker';
import pg from 'pg';
import type { BenchArgs, BenchHandler, SystemAdapter } from '../adapter.js';
import { loadPeer } from '../peer.js';

// graphile-worker 0.17 with the throughput settings its performance docs describe: a local queue (the
// pool fetches and locks a batch, workers are served from memory) and batched completions/failures.
// Bulk enqueue goes through `addJobs` (one add_jobs() call per chunk). Handlers are called once per job.

const TASK = 'bench_noop';
const ADD_CHUNK = 1000;
// ≈500, and never below concurrency: graphile warns that a local queue smaller than concurrency
// starves workers when jobs complete quickly.
const LOCAL_QUEUE_MIN = 500;
const BATCH_DELAY_MS = 0;

type GraphileModule = typeof Graphile;

// Quiet: graphile logs every worker start/stop at info level, which would interleave with the progress bar.
function quietLogger(g: GraphileModule): Logger {
  return new g.Logger((scope) => (level, message) => {
    if (level === 'error' || level === 'warning')
      process.stderr.write(`[graphile ${scope.label ?? ''}] ${message}\n`);
  });
}

export class GraphileAdapter implements SystemAdapter {
  readonly label = 'graphile';
  readonly schema = 'graphile_worker';
  private url = '';
  private utils: WorkerUtils | null = null;
  private runner: Runner | null = null;
  private pool: pg.Pool | null = null;
  private g: GraphileModule | null = null;
  private logger: Logger | null = null;
  private poolSize = 0;
  private concurrency = 0;
  private localQueueSize = LOCAL_QUEUE_MIN;

  async setup(url: string): Promise<void> {
    this.url = url;
    this.g = await loadPeer('--system graphile', () => import('graphile-worker'));
    this.logger = quietLogger(this.g);
    const logger = this.logger;
    await this.g.runMigrations({ connectionString: url, logger });
    this.utils = await this.g.makeWorkerUtils({ connectionString: url, logger });
    this.pool = new pg.Pool({ connectionString: url, max: 2 });
  }

  async enqueueBulk(
    n: number,
    make: (i: number) => BenchArgs,
    onProgress: (done: number) => void,
    unique = false,
  ) {
    for (let start = 0; start < n; start += ADD_CHUNK) {
      const size = Math.min(ADD_CHUNK, n - start);
      await this.db().addJobs(
        Array.from({ length: size }, (_, k) => ({
          identifier: TASK,
          payload: make(start + k),
          ...(unique ? { jobKey: `k${start + k}` } : {}),
        })),
      );
      onProgress(start + size);
    }
  }

  async enqueueBulkInTransaction(client: pg.ClientBase, args: readonly BenchArgs[]): Promise<void> {
    // The SQL function workerUtils.addJobs() calls, on the caller's client, in the same chunks.
    for (let start = 0; start < args.length; start += ADD_CHUNK) {
      const specs = args.slice(start, start + ADD_CHUNK).map((payload) => ({ identifier: TASK, payload }));
      await client.query(
        `select 1 from ${this.schema}.add_jobs(
           array(select json_populate_recordset(null::${this.schema}.job_spec, $1::json)), false)`,
        [JSON.stringify(specs)],
      );
    }
  }

  async enqueueBatch(args: readonly BenchArgs[]): Promise<void> {
    await this.db().addJobs(args.map((payload) => ({ identifier: TASK, payload })));
  }

  async enqueueOne(args: BenchArgs): Promise<void> {
    await this.db().addJob(TASK, args);
  }

  async enqueueInTransaction(client: pg.ClientBase, args: BenchArgs): Promise<void> {
    // The SQL API graphile-worker documents for enqueueing from your own transaction.
    await client.query(`select ${this.schema}.add_job($1, $2::json)`, [TASK, JSON.stringify(args)]);
  }

  async startWorkers(concurrency: number, handler: BenchHandler): Promise<void> {
    this.concurrency = concurrency;
    this.localQueueSize = Math.max(LOCAL_QUEUE_MIN, concurrency);
    // Their guidance is max(10, concurrentJobs + 2); with a local queue a worker does not hold a
    // connection per job, and max_connections (100 here) is shared with the harness, so cap it.
    this.poolSize = Math.min(Math.max(10, concurrency + 2), 40);
    this.runner = await this.graphile().run({
      connectionString: this.url,
      concurrency,
      maxPoolSize: this.poolSize,
      noHandleSignals: true,
      pollInterval: 2000,
      logger: this.logger ?? undefined,
      // The handler's value is not passed on: a task that returns an array reports per-job failures of a batch.
      taskList: {
        [TASK]: async (payload) => {
          await handler(payload as BenchArgs);
        },
      },
      preset: {
        worker: {
          localQueue: { size: this.localQueueSize },
          completeJobBatchDelay: BATCH_DELAY_MS,
          failJobBatchDelay: BATCH_DELAY_MS,
        },
      },
    });
  }

  async pending(): Promise<number> {
    // Completed jobs are deleted, so what is left is what is not settled yet.
    return this.count('true');
  }

  async depth(): Promise<number> {
    return this.count('locked_at is null');
  }

  async maintenance(): Promise<Record<string, number>> {
    return {};
  }

  settings(): Record<string, unknown> {
    return {
      bulk: `workerUtils.addJobs() in chunks of ${ADD_CHUNK}`,
      batch: 'workerUtils.addJobs()',
      single: 'workerUtils.addJob()',
      inTransaction: "select graphile_worker.add_job($1, $2::json) on the caller's client",
      concurrency: this.concurrency,
      maxPoolSize: this.poolSize,
      'preset.worker.localQueue.size': this.localQueueSize,
      'preset.worker.completeJobBatchDelay': BATCH_DELAY_MS,
      'preset.worker.failJobBatchDelay': BATCH_DELAY_MS,
      pollInterval: 2000,
      handler: 'one call per job',
    };
  }

  async stop(): Promise<void> {
    const runner = this.runner;
    this.runner = null;
    await runner?.stop();
    const utils = this.utils;
    this.utils = null;
    await utils?.release();
    const pool = this.pool;
    this.pool = null;
    await pool?.end();
  }

  private async count(where: string): Promise<number> {
    if (!this.pool) return 0;
    const { rows } = await this.pool.query<{ n: number }>(
      `select count(*)::int as n from ${this.schema}._private_jobs where ${where}`,
    );
    return rows[0]!.n;
  }

  private db(): WorkerUtils {
    if (!this.utils) throw new Error('graphile adapter used before setup()');
    return this.utils;
  }

  private graphile(): GraphileModule {
    if (!this.g) throw new Error('graphile adapter used before setup()');
    return this.g;
  }
}
