import type pg from 'pg';
import { validateCronList, type CronDefinition } from '../model/cron.js';
import { resolveDescription, type Description } from '../model/descriptor.js';
import { InvalidOptionError } from '../model/errors.js';
import { validateLimits, type QueueLimits } from '../model/limits.js';
import {
  rejectUnknownKeys,
  validateInt,
  validateName,
  validatePlainObject,
  validatePositive,
} from '../model/validation.js';
import {
  QUERY_TIMEOUT_MS,
  resolveSchema,
  validateConnectionString,
  validatePooler,
  validateSessionConnectionString,
  type Pooler,
  type Schema,
} from '../storage/index.js';
import { resolveThreadPool, type ResolvedThreadPool, type ThreadPoolOptions } from '../threads/config.js';

// Worker-host configuration: validated once, here, with errors that name the field. Everything after
// this point trusts HostConfig.

export interface QueueOptions {
  /** Jobs of this queue running at once in this process. Default 50. */
  concurrency?: number;
  /** Under a backlog, most jobs a claim may take beyond the free permits, held until a permit is free; only
   * as many as this process finishes in about 20 ms at its recent pace, or, when its claims take longer than
   * its handlers run, what finishes while a claim is in flight. Default: the concurrency; 0 turns it off. A
   * queue whose limits include a rate (declared or an operator's) holds nothing ahead, whatever this says. */
  prefetch?: number;
  /** Send jobs that fail for good to the dead-letter queue instead of failed history. Default false. */
  dlq?: boolean;
  /** Hard deadline of every attempt in this queue, enforced by the maintenance leader even if this
   * process hangs. Default 0 (none). */
  deadlineMs?: number;
  /** What operators see about this queue (label, description, owner, docs URL). */
  describe?: Description;
  /** How long this queue's stored results (what its handlers return) are kept after completion. Applied by the
   * maintenance leader, from its own configuration. Default: completedRetentionMs. */
  resultRetentionMs?: number;
  /** Limits on this queue's starts across every host (docs/flow-control.md): per key and per queue,
   * concurrency and rate. The last host to start declares them; an operator may override them. A job held
   * ahead of a permit (prefetch) has started, for its limits: prefetch 0 holds none, nor does a rate. */
  limits?: QueueLimits;
}

export interface WorkerOptions {
  connectionString?: string;
  pool?: pg.Pool;
  /** What connectionString (or pool) leads through: 'transaction' for a transaction-mode pooler (PgBouncer
   * `pool_mode = transaction`). Then nothing session-scoped goes through it: no statement_timeout set on its
   * connections, no named statements, and LISTEN and the leader lock take sessionConnectionString; without
   * one the host polls and does not stand for leadership, and says so once (a `warning` event,
   * AWA_POLLING_FALLBACK). Default 'none'. */
  pooler?: Pooler;
  /** A direct connection to PostgreSQL (not through a transaction-mode pooler) for what needs a session of its
   * own: the LISTEN connection and the maintenance leader's lock. Default: connectionString (or pool), unless
   * pooler is 'transaction'. */
  sessionConnectionString?: string;
  schema?: string;
  /** Queues to serve: a name → options (or just its concurrency). Default { default: 50 }. */
  queues?: Record<string, QueueOptions | number>;
  /** Most jobs one claim call takes. Default 512. */
  claimBatchSize?: number;
  /** Fallback poll when no notification arrives. Default 200 ms. */
  pollIntervalMs?: number;
  /** Settle flush (one settle_attempts() call) at this many settled attempts… Default 512. */
  settleBatchSize?: number;
  /** …or after this long. Default 1 ms. */
  settleFlushMs?: number;
  /** @deprecated The old name of `settleBatchSize`, still accepted. */
  completionBatchSize?: number;
  /** @deprecated The old name of `settleFlushMs`, still accepted. */
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
  /** A ring slot rotates once it holds this many ready rows, or is ringSlotMaxAgeMs old (0: at every
   * tick). Each rotation is a prune later, which makes the claims of that moment wait a few ms. Default
   * 10,000. */
  ringSlotMinRows?: number;
  /** Default 10 s. */
  ringSlotMaxAgeMs?: number;
  /** How long getJob still reports a completed job (compact history, outside the ring). Default 1 h. */
  completedRetentionMs?: number;
  /** Prune carries at most this many live rows and receipt members of the oldest slot forward into the
   * current one, so a few stragglers never stop the ring. Default 20,000. */
  ringCarryLimit?: number;
  /** …and only once this many ring slots hold rows (a healthy ring copies nothing). Default 8 (of 16). */
  ringCarryAfterSlots?: number;
  /** Pool size when the host creates its pool. Default: enough for claims, flushes and maintenance. */
  poolSize?: number;
  /** The longest one of the host's statements may run: the server cancels it then (statement_timeout). One
   * still unanswered a little later (half as long again, at most 5 s more) means the connection is dead (a
   * failover that left the old address black-holed, a frozen server, a route that drops packets silently): the
   * host gives it up and goes on with a new one, reporting AWA_DATABASE_UNRESPONSIVE. Applies to the
   * connections the host opens from connectionString; a pool passed in keeps its own settings. Default 30 s. */
  queryTimeoutMs?: number;
  /** Stable id of this process in receipts; default a random UUID. */
  instanceId?: string;
  /** How often this process proves it is alive (one row write for all its attempts, which also carries its
   * runtime snapshot: in-flight jobs, leadership). Default 5 s. */
  heartbeatIntervalMs?: number;
  /** How often this process reports its queue and kind descriptors. Default 60 s. */
  snapshotIntervalMs?: number;
  /** Attempts of a process silent for this long are rescued. At least 3 × heartbeatIntervalMs. Default 30 s. */
  heartbeatStalenessMs?: number;
  /** How often the leader looks for abandoned attempts. Default 5 s. */
  rescueIntervalMs?: number;
  /** How often the leader looks for parked jobs' callback timeouts it has not seen yet. A timeout it has seen
   * fires at its deadline; one registered less than this before its deadline may fire up to this late.
   * Default 1 s. */
  callbackTimeoutIntervalMs?: number;
  /** Keep failed/cancelled job history this long. Default 72 h. */
  failedRetentionMs?: number;
  /** Keep dead-letter entries this long. Default 30 days. */
  dlqRetentionMs?: number;
  /** Keep audit records (operator actions, dashboard logins) this long. Default 90 days. */
  auditRetentionMs?: number;
  /** Run the kinds declared `execution: 'pool'` in a worker-thread pool (see ThreadPoolOptions). */
  threadPool?: ThreadPoolOptions;
  /** Cron schedules this host declares (defineCron(...)); synced to the database when it starts. */
  cron?: readonly CronDefinition[];
  /** How often the maintenance leader evaluates cron schedules. Default 1 s. */
  cronIntervalMs?: number;
  /** An occurrence not fired within this long of its time is missed (see docs/cron.md). At least
   * 2 × cronIntervalMs. Default 10 s. */
  cronMissedAfterMs?: number;
}

const DAY = 86_400_000;

/**
 * Every integer option of the host, in one table: its default, its range. WorkerOptions above documents them
 * for editors; docs/configuration.md for readers.
 */
const INT_OPTIONS = {
  claimBatchSize: { dflt: 512, min: 1, max: 10_000 },
  pollIntervalMs: { dflt: 200, min: 1, max: 3_600_000 },
  settleBatchSize: { dflt: 512, min: 1, max: 10_000 },
  settleFlushMs: { dflt: 1, min: 0, max: 60_000 },
  shutdownTimeoutMs: { dflt: 30_000, min: 0, max: DAY },
  unknownKindDelayMs: { dflt: 60_000, min: 0, max: DAY },
  leaderElectionIntervalMs: { dflt: 2_000, min: 10, max: 3_600_000 },
  promoteIntervalMs: { dflt: 250, min: 10, max: 3_600_000 },
  ringIntervalMs: { dflt: 1_000, min: 10, max: 3_600_000 },
  ringSlotMinRows: { dflt: 10_000, min: 0, max: 100_000_000 },
  ringSlotMaxAgeMs: { dflt: 10_000, min: 0, max: DAY },
  ringCarryLimit: { dflt: 20_000, min: 0, max: 10_000_000 },
  ringCarryAfterSlots: { dflt: 8, min: 2, max: 16 },
  completedRetentionMs: { dflt: 3_600_000, min: 0, max: 30 * DAY },
  heartbeatIntervalMs: { dflt: 5_000, min: 50, max: DAY },
  snapshotIntervalMs: { dflt: 60_000, min: 100, max: DAY },
  rescueIntervalMs: { dflt: 5_000, min: 10, max: DAY },
  callbackTimeoutIntervalMs: { dflt: 1_000, min: 10, max: 3_600_000 },
  failedRetentionMs: { dflt: 3 * DAY, min: 0, max: 3650 * DAY },
  dlqRetentionMs: { dflt: 30 * DAY, min: 0, max: 3650 * DAY },
  auditRetentionMs: { dflt: 90 * DAY, min: 0, max: 3650 * DAY },
  cronIntervalMs: { dflt: 1_000, min: 10, max: 3_600_000 },
  queryTimeoutMs: QUERY_TIMEOUT_MS,
} as const;

type IntOption = keyof typeof INT_OPTIONS;

/** Options renamed to the glossary's word, and the name each had before: the old name still works. */
const RENAMED = { completionBatchSize: 'settleBatchSize', completionFlushMs: 'settleFlushMs' } as const;

const KEYS = [
  ...(Object.keys(INT_OPTIONS) as IntOption[]),
  ...(Object.keys(RENAMED) as (keyof typeof RENAMED)[]),
  'connectionString',
  'pool',
  'pooler',
  'sessionConnectionString',
  'schema',
  'queues',
  'priorityAgingMs',
  'maintenance',
  'poolSize',
  'instanceId',
  'heartbeatStalenessMs',
  'threadPool',
  'cron',
  'cronMissedAfterMs',
] as const;

export interface HostConfig extends Record<IntOption, number> {
  connectionString: string | undefined;
  pool: pg.Pool | undefined;
  pooler: Pooler;
  sessionConnectionString: string | undefined;
  schema: Schema;
  queues: Map<string, ResolvedQueue>;
  priorityAgingSeconds: number;
  maintenance: boolean;
  poolSize: number;
  instanceId: string;
  heartbeatStalenessMs: number;
  threadPool: ResolvedThreadPool | null;
  cron: readonly CronDefinition[];
  cronMissedAfterMs: number;
}

export interface ResolvedQueue {
  concurrency: number;
  prefetch: number;
  dlq: boolean;
  deadlineMs: number;
  description: Description;
  /** Null: the host's completedRetentionMs. */
  resultRetentionMs: number | null;
  /** Null: the queue declares no limits. */
  limits: QueueLimits | null;
}

function resolveQueue(name: string, q: QueueOptions | number): ResolvedQueue {
  if (typeof q === 'number') {
    const concurrency = validateInt(`queues.${name}.concurrency`, q, 1, 100_000);
    return {
      concurrency,
      prefetch: concurrency,
      dlq: false,
      deadlineMs: 0,
      description: {},
      resultRetentionMs: null,
      limits: null,
    };
  }
  validatePlainObject(`queues.${name}`, q);
  rejectUnknownKeys(`queues.${name}`, q, [
    'concurrency',
    'prefetch',
    'dlq',
    'deadlineMs',
    'describe',
    'resultRetentionMs',
    'limits',
  ]);
  if (q.dlq !== undefined && typeof q.dlq !== 'boolean')
    throw new InvalidOptionError(`queues.${name}.dlq`, 'must be true or false');
  const concurrency = validateInt(`queues.${name}.concurrency`, q.concurrency ?? 50, 1, 100_000);
  const limits = q.limits === undefined ? null : validateLimits(`queues.${name}.limits`, q.limits);
  return {
    concurrency,
    prefetch:
      q.prefetch === undefined ? concurrency : validateInt(`queues.${name}.prefetch`, q.prefetch, 0, 100_000),
    limits,
    dlq: q.dlq ?? false,
    deadlineMs:
      q.deadlineMs === undefined ? 0 : validateInt(`queues.${name}.deadlineMs`, q.deadlineMs, 1_000, 7 * DAY),
    description: resolveDescription(`queues.${name}.describe`, q.describe),
    resultRetentionMs:
      q.resultRetentionMs === undefined
        ? null
        : validateInt(
            `queues.${name}.resultRetentionMs`,
            q.resultRetentionMs,
            INT_OPTIONS.completedRetentionMs.min,
            INT_OPTIONS.completedRetentionMs.max,
          ),
  };
}

/** The value of an integer option and the name it was given under (its current or its old name). */
function givenAs(options: WorkerOptions, field: IntOption): [string, unknown] {
  const old = (Object.keys(RENAMED) as (keyof typeof RENAMED)[]).find((k) => RENAMED[k] === field);
  if (old === undefined || options[old] === undefined) return [field, options[field]];
  if (options[field] !== undefined)
    throw new InvalidOptionError(old, `is the old name of ${field}: give ${field} only`);
  return [old, options[old]];
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
  const ints = {} as Record<IntOption, number>;
  for (const [field, { dflt, min, max }] of Object.entries(INT_OPTIONS) as [
    IntOption,
    { dflt: number; min: number; max: number },
  ][]) {
    const [name, v] = givenAs(options, field);
    ints[field] = v === undefined ? dflt : validateInt(name, v, min, max);
  }
  if (options.maintenance !== undefined && typeof options.maintenance !== 'boolean') {
    throw new InvalidOptionError('maintenance', 'must be true or false');
  }
  const agingMs =
    options.priorityAgingMs === undefined
      ? 60_000
      : validatePositive('priorityAgingMs', options.priorityAgingMs);
  const maintenance = options.maintenance ?? true;
  const pooler = validatePooler(options.pooler);
  const sessionConnectionString = validateSessionConnectionString(options.sessionConnectionString);
  // Without a URL of either kind, the host's sessions come out of the pool passed in (see validateUserPool).
  const sessionsFromPool = !connectionString && !sessionConnectionString && pooler === 'none';
  return {
    ...ints,
    connectionString,
    pool:
      options.pool === undefined ? undefined : validateUserPool(options.pool, maintenance, sessionsFromPool),
    pooler,
    sessionConnectionString,
    schema: resolveSchema(options.schema),
    queues,
    priorityAgingSeconds: Math.max(1, Math.round(agingMs / 1000)),
    maintenance,
    poolSize:
      options.poolSize === undefined
        ? Math.min(4 + queues.size * 2, 50)
        : validateInt('poolSize', options.poolSize, 2, 1000),
    instanceId:
      options.instanceId === undefined ? crypto.randomUUID() : validateName('instanceId', options.instanceId),
    heartbeatStalenessMs: resolveStaleness(options.heartbeatStalenessMs, ints.heartbeatIntervalMs),
    threadPool: options.threadPool === undefined ? null : resolveThreadPool('threadPool', options.threadPool),
    cron: validateCronList('cron', options.cron),
    cronMissedAfterMs: resolveCronMissedAfter(options.cronMissedAfterMs, ints.cronIntervalMs),
  };
}

/**
 * A pool passed in lends the host its long-held connections (`sessionsFromPool`: no connection string says
 * where else they come from): LISTEN always, the leader's when it takes part in maintenance. Claims and settle
 * flushes need one more; with fewer, every claimed job would wait for a flush that never gets a connection
 * (running for good, no error), so a smaller pool is refused here.
 */
function validateUserPool(pool: unknown, maintenance: boolean, sessionsFromPool: boolean): pg.Pool {
  const p = pool as Partial<pg.Pool> | null;
  if (
    typeof p !== 'object' ||
    p === null ||
    typeof p.connect !== 'function' ||
    typeof p.query !== 'function'
  ) {
    throw new InvalidOptionError('pool', 'must be a pg.Pool');
  }
  const max = p.options?.max ?? 10;
  const need = sessionsFromPool ? (maintenance ? 3 : 2) : 1;
  if (max < need) {
    const held = sessionsFromPool
      ? ` one held for LISTEN,${maintenance ? ' one held by the maintenance leader,' : ''} and`
      : '';
    throw new InvalidOptionError(
      'pool',
      `allows ${max} connection(s); a host needs at least ${need} of it:${held} one for claims and completions ` +
        "(a few more let them run side by side). Raise the pool's max, or pass connectionString instead.",
    );
  }
  return pool as pg.Pool;
}

/** A single late heartbeat (GC pause, slow network) must not get a live worker's jobs rescued. */
function resolveStaleness(value: unknown, heartbeatIntervalMs: number): number {
  const staleness =
    value === undefined
      ? Math.max(30_000, 3 * heartbeatIntervalMs)
      : validateInt('heartbeatStalenessMs', value, 1_000, 7 * DAY);
  if (staleness < 3 * heartbeatIntervalMs) {
    throw new InvalidOptionError(
      'heartbeatStalenessMs',
      `must be at least 3 × heartbeatIntervalMs (${3 * heartbeatIntervalMs} ms), got ${staleness} ms`,
    );
  }
  return staleness;
}

/** An on-time occurrence must survive a tick that runs late: the window spans at least two ticks. */
function resolveCronMissedAfter(value: unknown, cronIntervalMs: number): number {
  if (value === undefined) return Math.max(10_000, 2 * cronIntervalMs);
  const ms = validateInt('cronMissedAfterMs', value, 0, 3_600_000);
  if (ms < 2 * cronIntervalMs) {
    throw new InvalidOptionError(
      'cronMissedAfterMs',
      `must be at least 2 × cronIntervalMs (${2 * cronIntervalMs} ms), got ${ms} ms`,
    );
  }
  return ms;
}

/** The queues whose stored results are kept for a time of their own (queues.<name>.resultRetentionMs); the
 * others keep theirs for completedRetentionMs. */
export function resultRetentionByQueue(c: Pick<HostConfig, 'queues'>): Map<string, number> {
  const byQueue = new Map<string, number>();
  for (const [name, q] of c.queues) if (q.resultRetentionMs !== null) byQueue.set(name, q.resultRetentionMs);
  return byQueue;
}
