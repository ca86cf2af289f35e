import type { ProgressBar } from '../src/terminal/progress.js';
import type { BenchArgs, SystemAdapter } from './adapter.js';
import { nowMs } from './pace.js';
import type { ResultRow } from './result-row.js';

// What a scenario gets and gives back. The CLI owns databases, setup/teardown and the final tuple sample;
// a scenario only drives the adapter and measures.

export interface ScenarioOptions {
  jobs: number;
  concurrency: number;
  /** Seconds, for time-based scenarios. */
  duration: number;
  /** Offered jobs/s, for paced scenarios. */
  rate: number;
  /** Seconds between samples in pinned/soak. */
  sampleEvery: number;
  /** Extra payload bytes per job (0: just the sequence number and timestamp). */
  payloadBytes: number;
  /** Concurrent producer transactions, each on a connection of its own (producers). */
  producers: number;
  /** How long each producer transaction stays open after its enqueue, in ms (producers). */
  holdMs: number;
  /** Worker processes sharing --concurrency (drain, awa); 0: workers in the harness process. */
  processes: number;
  /** Every job carries a distinct deduplication key (enqueue): what unique jobs cost each system. */
  unique: boolean;
  /** Enqueue: one job per statement (enqueueOne), `producers` calls in flight, instead of the bulk path. */
  single: boolean;
  /** With --otel: fraction of root traces the SDK records (1: every span). */
  otelSample: number;
  /** Awa: the bench queue's enqueue shards (1: one lane per priority, strict FIFO). */
  shards: number;
  /** Awa: the bench queue's `prefetch` (undefined: the host's default, the concurrency). */
  prefetch: number | undefined;
  /** Drain, in-process workers: CPU each handler call spends, in µs (0: a no-op handler). */
  handlerUs: number;
  /** Drain, in-process workers: every handler returns a small object, stored as the job's result (awa). */
  results: boolean;
  /** Mixed: what every handler call of a short job waits, in ms (0: a no-op). */
  handlerMs: number;
  /** Mixed: jobs that hold their permit for the whole run. */
  longJobs: number;
  /** Mixed: the fraction of producer transactions that roll back (0…1). */
  rollback: number;
  /** Awa through a transaction-mode pooler at this URL (--pooler-url); undefined: direct. */
  poolerUrl: string | undefined;
}

export interface ScenarioContext {
  adapter: SystemAdapter;
  /** The run's database, direct. */
  url: string;
  /** Where the application's own connections go (producers): the database through --pooler-url, else `url`. */
  appUrl: string;
  opts: ScenarioOptions;
  progress(label: string, total: number): ProgressBar;
}

export type Measurement = Partial<
  Pick<
    ResultRow,
    | 'jobs'
    | 'concurrency'
    | 'seconds'
    | 'jobsPerSec'
    | 'p50Ms'
    | 'p95Ms'
    | 'p99Ms'
    | 'maxMs'
    | 'deadTuples'
    | 'liveTuples'
    | 'extra'
  >
>;

/** A scenario driven through a system adapter, against a database of its own. */
export interface SystemScenario {
  kind: 'system';
  /** Systems it runs under --system all (pgboss-batch only where batch-ack mode changes the result). */
  systemsForAll: string[];
  run(ctx: ScenarioContext): Promise<Measurement>;
}

/** A scenario that needs no database (micro). */
export interface StandaloneScenario {
  kind: 'standalone';
  run(opts: ScenarioOptions): Promise<Measurement>;
}

export type Scenario = SystemScenario | StandaloneScenario;

export function makeArgs(payloadBytes: number): (i: number) => BenchArgs {
  const pad = payloadBytes > 0 ? 'x'.repeat(payloadBytes) : undefined;
  return (i) => (pad ? { i, t: nowMs(), pad } : { i, t: nowMs() });
}

export function round(n: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/** The middle value (of an even count, the upper middle one); 0 of none. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}
