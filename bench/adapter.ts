import type pg from 'pg';
import type { WorkerUsage } from './processes/protocol.js';

export type { WorkerUsage };

// The one interface every queue system is driven through, so each scenario is written once and the
// systems differ only in how they talk to PostgreSQL.

/** What every benchmark job carries: a sequence number and the producer's clock at enqueue (epoch ms,
 * fractional) so pickup latency is measured the same way for every system, from inside the handler. */
export interface BenchArgs {
  i: number;
  t: number;
  pad?: string;
}

/** What it returns is the job's result where the system stores one (awa: drain --results). */
export type BenchHandler = (args: BenchArgs) => unknown;

/** Worker processes spawned and loaded but not yet working (drain --processes). */
export interface WorkerFleet {
  /** Tells every process to start its worker host. */
  start(): void;
  /** Jobs the processes completed (committed), as they last reported; throws if one died. */
  completed(): number;
  /** What the processes' hosts have cost since they started, summed, as of the same reports. */
  usage(): WorkerUsage;
}

export interface SystemAdapter {
  /** Row label in reports ("awa", "pgboss", "pgboss-batch", "graphile"). */
  readonly label: string;
  /** The schema holding the system's tables (sampled for dead/live tuples). */
  readonly schema: string;
  /** Migrates/installs into a fresh database. */
  setup(url: string): Promise<void>;
  /** The fastest documented bulk path; `onProgress` gets the running total. With `unique`, job i carries the
   * deduplication key `k<i>` through the system's own mechanism. */
  enqueueBulk(
    n: number,
    make: (i: number) => BenchArgs,
    onProgress: (done: number) => void,
    unique?: boolean,
  ): Promise<void>;
  /** The same bulk path on the caller's client, inside the transaction it has open (mixed): every job
   * becomes visible at that transaction's commit, for every system alike. */
  enqueueBulkInTransaction(client: pg.ClientBase, args: readonly BenchArgs[]): Promise<void>;
  /** A producer batch (multi-row insert) for steady-rate scenarios. */
  enqueueBatch(args: readonly BenchArgs[]): Promise<void>;
  /** One job, one statement: what an application does per request. */
  enqueueOne(args: BenchArgs): Promise<void>;
  /** One job on the caller's client, inside the transaction it has open (the producers scenario): the
   * job must commit or roll back with that transaction. */
  enqueueInTransaction(client: pg.ClientBase, args: BenchArgs): Promise<void>;
  /** `longJobs`: how many of the jobs will hold their slot for the whole run (mixed), for a system whose
   * workers fetch in batches and must be sized so those few cannot stall the rest (pg-boss). */
  startWorkers(concurrency: number, handler: BenchHandler, longJobs?: number): Promise<void>;
  /** No-op workers in `processes` child processes of `concurrency` each, loaded and waiting for start()
   * (so process start-up is not timed; the worker hosts' own start is, as in-process). Only systems that
   * support it (awa); stop() ends them. */
  spawnWorkerProcesses?(processes: number, concurrency: number): Promise<WorkerFleet>;
  /** What the in-process workers have cost since startWorkers() (CPU of the whole harness process,
   * claim calls, settle flushes), where the system counts them (awa). */
  workerUsage?(): WorkerUsage;
  /** Jobs enqueued but not yet settled in the database (with no workers: every committed job). */
  pending(): Promise<number>;
  /** Jobs available and not yet claimed. */
  depth(): Promise<number>;
  /** Counters the system reports about its own maintenance (awa: ring rotations and prunes). */
  maintenance(): Promise<Record<string, number>>;
  /** The settings used, stated in the report. */
  settings(): Record<string, unknown>;
  /** Stops workers and closes every connection. Idempotent. */
  stop(): Promise<void>;
}

export type SystemName = 'awa' | 'pgboss' | 'pgboss-batch' | 'graphile' | 'baseline';
