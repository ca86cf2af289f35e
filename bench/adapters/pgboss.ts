import pg from 'pg';
import type * as PgBossTypes from 'pg-boss';
import { BenchUsageError } from '../args.js';
import { loadPeer } from '../peer.js';
import type { BenchArgs, BenchHandler, SystemAdapter } from '../adapter.js';

// pg-boss 12 with its best documented throughput settings: bulk `insert()` in chunks, workers fetching
// batches (`batchSize`) with `burstWhenBatchFull` so a full fetch is followed by another at once, and
// LISTEN/NOTIFY for pickup. Two handler modes:
//   per-job (label "pgboss"):       `perJobResults: true` — the handler is called once per job and each job
//                                   is settled with its own outcome (one failing job fails only itself);
//   batch   (label "pgboss-batch"): the plain batch handler — the whole batch completes or fails together,
//                                   which is batch-ack semantics, shown as an extra row only.
// pg-boss 12 declares Node >= 22; it is loaded lazily so a failure to load it names the cause.

const QUEUE = 'bench';
const INSERT_CHUNK = 1000;

type PgBossModule = typeof PgBossTypes;
type Boss = InstanceType<PgBossModule['PgBoss']>;

async function loadPgBoss(): Promise<PgBossModule> {
  try {
    return await loadPeer('--system pgboss', () => import('pg-boss'));
  } catch (err) {
    if (err instanceof BenchUsageError) throw err;
    throw new Error(
      `pg-boss could not be loaded on Node ${process.version} (pg-boss 12 declares Node >= 22.12): ${
        err instanceof Error ? err.message : String(err)
      }`,
    );
  }
}

export class PgBossAdapter implements SystemAdapter {
  readonly label: string;
  readonly schema = 'pgboss';
  private boss: Boss | null = null;
  private pool: pg.Pool | null = null;
  private workOptions: Record<string, unknown> = {};
  private readonly clientDbs = new WeakMap<pg.ClientBase, PgBossTypes.Db>();

  constructor(private readonly mode: 'per-job' | 'batch') {
    this.label = mode === 'batch' ? 'pgboss-batch' : 'pgboss';
  }

  async setup(url: string): Promise<void> {
    const { PgBoss } = await loadPgBoss();
    // schedule off: the cron machinery is not under test; supervise stays on as in production.
    const boss = new PgBoss({
      connectionString: url,
      schema: this.schema,
      max: 12,
      schedule: false,
      useListenNotify: true,
    });
    boss.on('error', (err: unknown) =>
      process.stderr.write(`[pg-boss] ${err instanceof Error ? err.message : String(err)}\n`),
    );
    await boss.start();
    await boss.createQueue(QUEUE, { notify: true });
    this.boss = boss;
    this.pool = new pg.Pool({ connectionString: url, max: 2 });
  }

  async enqueueBulk(
    n: number,
    make: (i: number) => BenchArgs,
    onProgress: (done: number) => void,
    unique = false,
  ) {
    for (let start = 0; start < n; start += INSERT_CHUNK) {
      const size = Math.min(INSERT_CHUNK, n - start);
      await this.db().insert(
        QUEUE,
        Array.from({ length: size }, (_, k) => ({
          data: make(start + k),
          ...(unique ? { singletonKey: `k${start + k}` } : {}),
        })),
      );
      onProgress(start + size);
    }
  }

  async enqueueBulkInTransaction(client: pg.ClientBase, args: readonly BenchArgs[]): Promise<void> {
    for (let start = 0; start < args.length; start += INSERT_CHUNK) {
      const chunk = args.slice(start, start + INSERT_CHUNK).map((data) => ({ data }));
      await this.db().insert(QUEUE, chunk, { db: this.onClient(client) });
    }
  }

  async enqueueBatch(args: readonly BenchArgs[]): Promise<void> {
    await this.db().insert(
      QUEUE,
      args.map((data) => ({ data })),
    );
  }

  async enqueueOne(args: BenchArgs): Promise<void> {
    await this.db().send(QUEUE, args);
  }

  async enqueueInTransaction(client: pg.ClientBase, args: BenchArgs): Promise<void> {
    // pg-boss runs a call on the caller's connection when given `db`, any object with executeSql().
    await this.db().send(QUEUE, args, { db: this.onClient(client) });
  }

  private onClient(client: pg.ClientBase): PgBossTypes.Db {
    let db = this.clientDbs.get(client);
    if (!db) {
      db = { executeSql: (text, values) => client.query(text, values) };
      this.clientDbs.set(client, db);
    }
    return db;
  }

  async startWorkers(concurrency: number, handler: BenchHandler, longJobs = 0): Promise<void> {
    // In-flight jobs = batchSize × localConcurrency; keep that at about `concurrency`, with batches of at
    // most 500 (larger fetches lock more rows for longer without measurably raising throughput). A batch is
    // done only when its slowest job is: each job that runs for the whole run can hold a fetch worker, so
    // there is one more worker per such job (and smaller batches, to keep the total).
    const workers = Math.max(1, Math.round(concurrency / Math.min(500, concurrency))) + longJobs;
    const batchSize = Math.max(1, Math.floor(concurrency / workers));
    const localConcurrency = longJobs > 0 ? workers : Math.max(1, Math.round(concurrency / batchSize));
    const base = { batchSize, localConcurrency, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 };
    this.workOptions = { ...base, perJobResults: this.mode === 'per-job' };
    const boss = this.db();
    if (this.mode === 'per-job') {
      await boss.work<BenchArgs>(QUEUE, { ...base, perJobResults: true }, async (jobs) =>
        Promise.all(
          jobs.map(async (job) => {
            try {
              await handler(job.data);
              return { id: job.id, status: 'completed' as const };
            } catch (err) {
              return { id: job.id, status: 'failed' as const, output: { message: String(err) } };
            }
          }),
        ),
      );
    } else {
      await boss.work<BenchArgs>(QUEUE, base, async (jobs) => {
        for (const job of jobs) await handler(job.data);
      });
    }
  }

  async pending(): Promise<number> {
    return this.count(`state in ('created', 'retry', 'active')`);
  }

  async depth(): Promise<number> {
    return this.count(`state in ('created', 'retry')`);
  }

  async maintenance(): Promise<Record<string, number>> {
    return {};
  }

  settings(): Record<string, unknown> {
    return {
      bulk: `boss.insert() in chunks of ${INSERT_CHUNK}`,
      batch: 'boss.insert()',
      single: 'boss.send()',
      inTransaction: "boss.send(name, data, { db }) with db.executeSql on the caller's client",
      constructor: { max: 12, schedule: false, supervise: true, useListenNotify: true },
      queue: { notify: true, policy: 'standard' },
      work: this.workOptions,
      handler: this.mode === 'per-job' ? 'one call per job, perJobResults' : 'one call per batch (batch ack)',
    };
  }

  async stop(): Promise<void> {
    const boss = this.boss;
    this.boss = null;
    await boss?.stop({ graceful: true, timeout: 10_000, close: true });
    const pool = this.pool;
    this.pool = null;
    await pool?.end();
  }

  private async count(where: string): Promise<number> {
    if (!this.pool) return 0;
    const { rows } = await this.pool.query<{ n: number }>(
      `select count(*)::int as n from ${this.schema}.job where name = $1 and ${where}`,
      [QUEUE],
    );
    return rows[0]!.n;
  }

  private db(): Boss {
    if (!this.boss) throw new Error('pg-boss adapter used before setup()');
    return this.boss;
  }
}
