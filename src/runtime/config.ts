import { availableParallelism } from 'node:os';
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';
import type pg from 'pg';
import { InvalidOptionError } from '../model/errors.js';
import {
  describe,
  rejectUnknownKeys,
  validateInt,
  validateName,
  validatePlainObject,
  validatePositive,
} from '../model/validation.js';
import { resolveSchema, validateConnectionString, type Schema } from '../storage/index.js';

// Worker-host configuration: validated once, here, with errors that name the field. Everything after
// this point trusts HostConfig.

export interface QueueOptions {
  /** Jobs of this queue running at once in this process. Default 50. */
  concurrency?: number;
  /** Send jobs that fail for good to the dead-letter queue instead of failed history. Default false. */
  dlq?: boolean;
  /** Hard deadline of every attempt in this queue, enforced by the maintenance leader even if this
   * process hangs. Default 0 (none). */
  deadlineMs?: number;
}

export interface WorkerOptions {
  connectionString?: string;
  pool?: pg.Pool;
  schema?: string;
  /** Queues to serve: a name → options (or just its concurrency). Default { default: 50 }. */
  queues?: Record<string, QueueOptions | number>;
  /** Most jobs one claim call takes. Default 512. */
  claimBatchSize?: number;
  /** Fallback poll when no notification arrives. Default 200 ms. */
  pollIntervalMs?: number;
  /** Completion flush at this many results… Default 512. */
  completionBatchSize?: number;
  /** …or after this long. Default 1 ms. */
  completionFlushMs?: number;
  /** Effective priority improves one level per this much waiting. Default 60 s. */
  priorityAgingMs?: number;
  /** How long stop() lets running jobs finish before aborting them. Default 30 s. */
  shutdownTimeoutMs?: number;
  /** A job whose kind no handler knows is handed back (snoozed) for this long. Default 60 s. */
  unknownKindDelayMs?: number;
  /** Take part in maintenance-leader election. Default true. */
  maintenance?: boolean;
  /** How often a non-leader tries to become leader. Default 2 s. */
  leaderElectionIntervalMs?: number;
  /** Promotion of due scheduled/retry jobs. Default every 250 ms. */
  promoteIntervalMs?: number;
  /** Ring rotation and prune. Default every 1 s. */
  ringIntervalMs?: number;
  /** Keep completed-job history at least this long before prune may drop it. Default 0. */
  completedRetentionMs?: number;
  /** Pool size when the host creates its pool. Default: enough for claims, flushes and maintenance. */
  poolSize?: number;
  /** Stable id of this process in receipts; default a random UUID. */
  instanceId?: string;
  /** How often this process proves it is alive (one row write for all its attempts). Default 5 s. */
  heartbeatIntervalMs?: number;
  /** Attempts of a process silent for this long are rescued. At least 3 × heartbeatIntervalMs. Default 30 s. */
  heartbeatStalenessMs?: number;
  /** How often the leader looks for abandoned attempts. Default 5 s. */
  rescueIntervalMs?: number;
  /** Keep failed/cancelled job history this long. Default 72 h. */
  failedRetentionMs?: number;
  /** Keep dead-letter entries this long. Default 30 days. */
  dlqRetentionMs?: number;
  /** Run the kinds declared `execution: 'pool'` in a worker-thread pool (see ThreadPoolOptions). */
  threadPool?: ThreadPoolOptions;
}

/** The worker-thread pool for CPU-heavy kinds. (`pool` is taken: it is the pg.Pool option.) */
export interface ThreadPoolOptions {
  /** Absolute path or file: URL of the handlers module; each thread imports it once. */
  module: string;
  /** Threads. Default os.availableParallelism(). */
  size?: number;
  /** Most jobs sent to a thread in one task. Default 32. */
  maxBatch?: number;
  /** How long a job may wait for batch-mates before its task is sent. Default 1 ms. */
  batchDelayMs?: number;
  /** After a job's signal aborts, how long its thread may ignore it before being terminated. Default 5 s. */
  graceMs?: number;
}

export interface ResolvedThreadPool {
  /** file: URL of the handlers module. */
  module: string;
  size: number;
  maxBatch: number;
  batchDelayMs: number;
  graceMs: number;
}

const THREAD_POOL_KEYS = ['module', 'size', 'maxBatch', 'batchDelayMs', 'graceMs'] as const;

/** Validates thread-pool options; `field` prefixes every error ("threadPool.size"). */
export function resolveThreadPool(field: string, value: unknown): ResolvedThreadPool {
  const o = validatePlainObject(field, value);
  rejectUnknownKeys(field, o, THREAD_POOL_KEYS);
  const spec = o.module;
  if (typeof spec !== 'string' || !(spec.startsWith('file:') || isAbsolute(spec))) {
    throw new InvalidOptionError(
      `${field}.module`,
      `must be an absolute path or a file: URL, got ${describe(spec)}`,
    );
  }
  const int = (key: string, dflt: number, min: number, max: number): number =>
    o[key] === undefined ? dflt : validateInt(`${field}.${key}`, o[key], min, max);
  return {
    module: spec.startsWith('file:') ? spec : pathToFileURL(spec).href,
    size: int('size', availableParallelism(), 1, 1024),
    maxBatch: int('maxBatch', 32, 1, 10_000),
    batchDelayMs: int('batchDelayMs', 1, 0, 60_000),
    graceMs: int('graceMs', 5_000, 0, 3_600_000),
  };
}

const KEYS = [
  'connectionString',
  'pool',
  'schema',
  'queues',
  'claimBatchSize',
  'pollIntervalMs',
  'completionBatchSize',
  'completionFlushMs',
  'priorityAgingMs',
  'shutdownTimeoutMs',
  'unknownKindDelayMs',
  'maintenance',
  'leaderElectionIntervalMs',
  'promoteIntervalMs',
  'ringIntervalMs',
  'completedRetentionMs',
  'poolSize',
  'instanceId',
  'heartbeatIntervalMs',
  'heartbeatStalenessMs',
  'rescueIntervalMs',
  'failedRetentionMs',
  'dlqRetentionMs',
  'threadPool',
] as const;

export interface HostConfig {
  connectionString: string | undefined;
  pool: pg.Pool | undefined;
  schema: Schema;
  queues: Map<string, ResolvedQueue>;
  claimBatchSize: number;
  pollIntervalMs: number;
  completionBatchSize: number;
  completionFlushMs: number;
  priorityAgingSeconds: number;
  shutdownTimeoutMs: number;
  unknownKindDelayMs: number;
  maintenance: boolean;
  leaderElectionIntervalMs: number;
  promoteIntervalMs: number;
  ringIntervalMs: number;
  completedRetentionMs: number;
  poolSize: number;
  instanceId: string;
  heartbeatIntervalMs: number;
  heartbeatStalenessMs: number;
  rescueIntervalMs: number;
  failedRetentionMs: number;
  dlqRetentionMs: number;
  threadPool: ResolvedThreadPool | null;
}

export interface ResolvedQueue {
  concurrency: number;
  dlq: boolean;
  deadlineMs: number;
}

const DAY = 86_400_000;

function resolveQueue(name: string, q: QueueOptions | number): ResolvedQueue {
  if (typeof q === 'number')
    return {
      concurrency: validateInt(`queues.${name}.concurrency`, q, 1, 100_000),
      dlq: false,
      deadlineMs: 0,
    };
  validatePlainObject(`queues.${name}`, q);
  rejectUnknownKeys(`queues.${name}`, q, ['concurrency', 'dlq', 'deadlineMs']);
  if (q.dlq !== undefined && typeof q.dlq !== 'boolean')
    throw new InvalidOptionError(`queues.${name}.dlq`, 'must be true or false');
  return {
    concurrency: validateInt(`queues.${name}.concurrency`, q.concurrency ?? 50, 1, 100_000),
    dlq: q.dlq ?? false,
    deadlineMs:
      q.deadlineMs === undefined ? 0 : validateInt(`queues.${name}.deadlineMs`, q.deadlineMs, 1_000, 7 * DAY),
  };
}

export function resolveHostConfig(options: WorkerOptions): HostConfig {
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options, KEYS);
  if (!options.pool && !options.connectionString) {
    throw new InvalidOptionError(
      'connectionString',
      'is required (or pass `pool`); set DATABASE_URL or pass it',
    );
  }
  const connectionString =
    options.connectionString === undefined ? undefined : validateConnectionString(options.connectionString);
  const queues = new Map<string, ResolvedQueue>();
  for (const [name, q] of Object.entries(options.queues ?? { default: 50 }))
    queues.set(validateName('queues', name), resolveQueue(name, q));
  if (queues.size === 0) throw new InvalidOptionError('queues', 'must name at least one queue');
  const int = (field: (typeof KEYS)[number], dflt: number, min: number, max: number): number => {
    const v = options[field as keyof WorkerOptions];
    return v === undefined ? dflt : validateInt(field, v, min, max);
  };
  if (options.maintenance !== undefined && typeof options.maintenance !== 'boolean') {
    throw new InvalidOptionError('maintenance', 'must be true or false');
  }
  const agingMs =
    options.priorityAgingMs === undefined
      ? 60_000
      : validatePositive('priorityAgingMs', options.priorityAgingMs);
  return {
    connectionString,
    pool: options.pool,
    schema: resolveSchema(options.schema),
    queues,
    claimBatchSize: int('claimBatchSize', 512, 1, 10_000),
    pollIntervalMs: int('pollIntervalMs', 200, 1, 3_600_000),
    completionBatchSize: int('completionBatchSize', 512, 1, 10_000),
    completionFlushMs: int('completionFlushMs', 1, 0, 60_000),
    priorityAgingSeconds: Math.max(1, Math.round(agingMs / 1000)),
    shutdownTimeoutMs: int('shutdownTimeoutMs', 30_000, 0, 86_400_000),
    unknownKindDelayMs: int('unknownKindDelayMs', 60_000, 0, 86_400_000),
    maintenance: options.maintenance ?? true,
    leaderElectionIntervalMs: int('leaderElectionIntervalMs', 2_000, 10, 3_600_000),
    promoteIntervalMs: int('promoteIntervalMs', 250, 10, 3_600_000),
    ringIntervalMs: int('ringIntervalMs', 1_000, 10, 3_600_000),
    completedRetentionMs: int('completedRetentionMs', 0, 0, 30 * 86_400_000),
    poolSize: int('poolSize', Math.min(4 + queues.size * 2, 50), 2, 1000),
    instanceId:
      options.instanceId === undefined ? crypto.randomUUID() : validateName('instanceId', options.instanceId),
    ...resolveLiveness(int),
    failedRetentionMs: int('failedRetentionMs', 3 * DAY, 0, 3650 * DAY),
    dlqRetentionMs: int('dlqRetentionMs', 30 * DAY, 0, 3650 * DAY),
    threadPool: options.threadPool === undefined ? null : resolveThreadPool('threadPool', options.threadPool),
  };
}

function resolveLiveness(
  int: (field: (typeof KEYS)[number], dflt: number, min: number, max: number) => number,
) {
  const heartbeatIntervalMs = int('heartbeatIntervalMs', 5_000, 50, DAY);
  const heartbeatStalenessMs = int(
    'heartbeatStalenessMs',
    Math.max(30_000, 3 * heartbeatIntervalMs),
    1_000,
    7 * DAY,
  );
  // A single late heartbeat (GC pause, slow network) must not get a live worker's jobs rescued.
  if (heartbeatStalenessMs < 3 * heartbeatIntervalMs) {
    throw new InvalidOptionError(
      'heartbeatStalenessMs',
      `must be at least 3 × heartbeatIntervalMs (${3 * heartbeatIntervalMs} ms), got ${heartbeatStalenessMs} ms`,
    );
  }
  return {
    heartbeatIntervalMs,
    heartbeatStalenessMs,
    rescueIntervalMs: int('rescueIntervalMs', 5_000, 10, DAY),
  };
}
