// The real side of a model-based run: a migrated database shared by a few runs (each run works in queues and
// instances of its own), driven through the client API and the storage contract of a variant
// (test/conformance/variants.ts) directly, with maintenance
// (promote, rescue, rotate, prune, callback timeouts) as explicit steps. No worker host: its timers would make
// a step's outcome depend on the clock.
import pg from 'pg';
import { AwaClient, type QueueLimits } from '../../src/index.js';
import { resolveSchema, type Schema, type Storage } from '../../src/storage/operations.js';
import { ringVariant, type StorageVariant } from '../conformance/variants.js';
import { limitsJson, type ModelLimits } from './flow-control.js';
import { QueueModel, TERMINAL } from './model.js';

/** The limits a run's limited queue declares (as a host would): one attempt per key, four starts per key
 * per hour (a window no run outlives, see flow-control.ts), three attempts of the queue. */
export const DECLARED_LIMITS: ModelLimits = { keyConcurrency: 1, keyRate: 4, queueConcurrency: 3 };
/** Strict FIFO per key declared, for the runs that exercise it from their first claim on (an operator's override
 * to it comes late in a random run, if at all). One attempt per key, no rate and no cap on the queue: the
 * declared rate (four starts of a key an hour) and the queue's three attempts mostly left a job that failed and
 * retries no room to run again in its own slot. */
export const FIFO_DECLARED_LIMITS: ModelLimits = { keyConcurrency: 1, fifo: true };
/** The args field a limited job's key comes from. */
export const KEY_ARG = 'tenant';

/** A database on `serverUrl`, created and migrated for this test; dropped by `drop()`. */
export interface ModelDatabase {
  url: string;
  client: AwaClient;
  pool: pg.Pool;
  schema: Schema;
  /** The storage under test, and its hooks. */
  variant: StorageVariant;
  storage: Storage;
  drop(): Promise<void>;
}

let created = 0;

async function onServer(serverUrl: string, sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

/** A fresh database: migrated, or (faster) a copy of `template`, a migrated database nobody is connected to. */
export async function createModelDatabase(
  serverUrl: string,
  label: string,
  template?: string,
  variant: StorageVariant = ringVariant,
): Promise<ModelDatabase & { name: string }> {
  const name = `awa_model_${label}_${process.pid}_${Date.now().toString(36)}_${created++}`;
  // A template's last session can still be on its way out after its pool ended (more so on a busy machine):
  // the copy is refused while it is, so it is tried again for a while.
  for (let attempt = 1; ; attempt++) {
    try {
      await onServer(serverUrl, `create database ${name}${template ? ` template ${template}` : ''}`);
      break;
    } catch (err) {
      if (attempt >= 50 || !/being accessed by other users/.test(String(err))) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const u = new URL(serverUrl);
  u.pathname = `/${name}`;
  const url = u.toString();
  // The runs take thousands of operator actions; their audit lines (stderr by default) would bury the report.
  const client = new AwaClient({ connectionString: url, poolSize: 6, onAudit: () => {} });
  if (!template) await client.migrate();
  const pool = new pg.Pool({ connectionString: url, max: 6, application_name: 'awa-model' });
  pool.on('error', () => {});
  let dropped = false;
  return {
    name,
    url,
    client,
    pool,
    schema: resolveSchema(),
    variant,
    storage: variant.create(resolveSchema()),
    async drop() {
      if (dropped) return;
      dropped = true;
      await client.close();
      await pool.end();
      await onServer(serverUrl, `drop database if exists ${name} with (force)`);
    },
  };
}

/**
 * Databases for a series of runs, each shared by at most `runsPerDatabase` of them. Every run adds queues and
 * their lanes, and counts() takes about four locks per lane (with ~230 more) in one transaction: hundreds of
 * lanes exhaust a default server's shared lock table (out of shared memory). A new database is a copy of a
 * migrated template, so it costs a fraction of a migration.
 */
export class ModelDatabases {
  private template: (ModelDatabase & { name: string }) | null = null;
  private db: ModelDatabase | null = null;
  private runs = 0;

  constructor(
    readonly serverUrl: string,
    readonly variant: StorageVariant = ringVariant,
    readonly runsPerDatabase = 8,
  ) {}

  /** The database being made, if any: close() waits for it (see there). */
  private making: Promise<ModelDatabase> | null = null;

  /** Makes the template and the first database now, before any run: a run's time limit is then spent on runs,
   * not on creating databases (on a busy machine the first one alone outlasted the limit, and a property
   * interrupted before any run completed is reported as a failure). */
  async warm(): Promise<void> {
    await this.next();
    this.runs = 0;
  }

  next(): Promise<ModelDatabase> {
    const making = this.nextDatabase();
    this.making = making;
    return making;
  }

  private async nextDatabase(): Promise<ModelDatabase> {
    if (this.db && this.runs < this.runsPerDatabase) {
      this.runs++;
      return this.db;
    }
    // Forgotten before it is dropped: a failure below must not leave a dropped database to be used again.
    const spent = this.db;
    this.db = null;
    await spent?.drop();
    if (!this.template) {
      this.template = await createModelDatabase(this.serverUrl, 'tmpl');
      await this.template.client.close();
      await this.template.pool.end();
    }
    this.db = await createModelDatabase(this.serverUrl, 'run', this.template.name, this.variant);
    this.runs = 1;
    return this.db;
  }

  async close(): Promise<void> {
    // A run cut short by fast-check's time limit leaves its next() running: waited for here, or the databases
    // it goes on to create outlive the close (two did, once, under a loaded suite).
    await this.making?.catch(() => {});
    await this.db?.drop();
    this.db = null;
    if (this.template)
      await onServer(this.serverUrl, `drop database if exists ${this.template.name} with (force)`);
    this.template = null;
  }
}

/** A job enqueued on the open caller transaction: it exists only if that transaction commits. */
export interface PendingJob {
  id: string | null;
  uid: string;
  queue: string;
  priority: number;
  bulk: boolean;
  maxAttempts: number;
  pos: number;
  scheduled: boolean;
}

/** One run's real side: its queues and instances, and the caller transaction it may hold open across steps. */
export class Real {
  tx: pg.Client | null = null;
  txJobs: PendingJob[] = [];
  /** Commands run since the open transaction began (a job committed after others ran may run after them). */
  txSteps = 0;
  private uid = 0;

  constructor(
    readonly db: ModelDatabase,
    readonly run: string,
    readonly queues: readonly string[],
    readonly dlqQueues: ReadonlySet<string>,
    readonly instances: readonly string[],
  ) {}

  /** A run's queues: two unlimited (the second with a DLQ) and a third with the limits its hosts declare. */
  static async open(
    db: ModelDatabase,
    run: string,
    declared: ModelLimits = DECLARED_LIMITS,
  ): Promise<{ model: QueueModel; real: Real }> {
    const queues = [`${run}_a`, `${run}_b`, `${run}_l`];
    const dlq = new Set([queues[1]!]);
    const limited = queues[2]!;
    const instances = [`${run}-i1`, `${run}-i2`];
    for (const id of instances)
      await db.storage.instances.registerInstance(
        db.pool,
        id,
        queues.map((q) => ({
          queue: q,
          dlq: dlq.has(q),
          concurrency: 10,
          ...(q === limited ? { limits: limitsJson(declared, KEY_ARG) as QueueLimits } : {}),
        })),
        'model',
      );
    return {
      model: new QueueModel(queues, dlq, new Map([[limited, declared]])),
      real: new Real(db, run, queues, dlq, instances),
    };
  }

  nextUid(): string {
    return `${this.run}:${++this.uid}`;
  }

  async beginTx(): Promise<pg.Client> {
    if (this.tx) return this.tx;
    const c = new pg.Client({ connectionString: this.db.url, application_name: 'awa-model-tx' });
    c.on('error', () => {});
    await c.connect();
    await c.query('begin');
    this.tx = c;
    this.txSteps = 0;
    return c;
  }

  async endTx(how: 'commit' | 'rollback'): Promise<PendingJob[]> {
    const c = this.tx;
    if (!c) return [];
    const jobs = this.txJobs;
    this.tx = null;
    this.txJobs = [];
    try {
      await c.query(how);
    } finally {
      await c.end().catch(() => {});
    }
    return jobs;
  }

  /** The ids of jobs a COPY load inserted, found by the uid each carries in its args (COPY returns counts). */
  async idsByUid(uids: readonly string[]): Promise<Map<string, string>> {
    return this.db.variant.hooks.idsByUid(this.db.pool, this.db.schema, uids);
  }

  /** Leaves nothing of this run that could hold the ring: rolls back its open transaction, cancels every job
   * that has not ended, resumes its queues. */
  async close(model: QueueModel): Promise<void> {
    await this.endTx('rollback').catch(() => {});
    for (const j of model.jobs.values())
      if (!TERMINAL.has(j.state)) await this.db.client.cancel(j.id, 'model run over').catch(() => {});
    for (const q of this.queues) await this.db.client.resumeQueue(q).catch(() => {});
    await this.db.variant.hooks.forgetInstances(this.db.pool, this.db.schema, this.instances).catch(() => {});
  }
}
