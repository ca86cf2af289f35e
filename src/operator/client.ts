import type pg from 'pg';
import type { Actor, ActorOptions, AuditFilter, AuditRecord } from '../model/audit.js';
import { InvalidOptionError } from '../model/errors.js';
import { MAX_ENQUEUE_SHARDS, type JobKind } from '../model/job-kind.js';
import { validateLimitsOverride, type LimitsOverride, type QueueLimits } from '../model/limits.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodeArgs } from '../model/payload.js';
import {
  rejectUnknownKeys,
  validateInt,
  validateJobId,
  validateName,
  validatePlainObject,
} from '../model/validation.js';
import {
  applyMigrations,
  validatePooler,
  validateSessionConnectionString,
  migrationPlan,
  assertMigrated,
  pendingSql,
  redact,
  resolveSchema,
  withClient,
  withOwnConnection,
  ClientPool,
  ringStorage,
  type Storage,
  type Audited,
  type CancelledFrom,
  type CallbackAction,
  type CallbackDelivery,
  type Descriptor,
  type DlqCount,
  type DlqEntry,
  type DlqSummary,
  type DlqTarget,
  type JobListFilter,
  type JobSummary,
  type QueueHealth,
  type RuntimeInstance,
  type StorageFamily,
  type EnqueueResult,
  type JobRecord,
  type JobProgress,
  type RecordedStep,
  type MigrateResult,
  type MigrationPlan,
  type QueueCounts,
  type QueueRemoval,
  type QueueLimitsState,
  type FlowRecord,
  type FlowSummary,
  type ReadLag,
  type RetryOutcome,
  type RingSlot,
  type Schema,
} from '../storage/index.js';
import {
  listCronSchedules,
  removeSchedule,
  setSchedulePaused,
  triggerSchedule,
  type CronSchedule,
  type CronTriggerResult,
} from './cron.js';
import { AuditTrail, auditEntry, auditFilter } from './audit-trail.js';
import { dlqCountFilter, dlqPageFilter, dlqTarget, jobListFilter } from './filters.js';
import { ProducerTelemetry, telemetryScope } from '../telemetry/index.js';
import type { CopyEnqueueResult, JobInput } from '../producer/copy-load.js';
import type { FlowInput } from '../model/flow.js';
import { Producer, type CopyEnqueueOptions, type EnqueueOptions } from '../producer/producer.js';
import {
  CLIENT_OPTION_KEYS,
  createOption,
  type ClientOptions,
  type FlowEnqueueResult,
  type QueueSettingOptions,
} from './client-options.js';

export type { ClientOptions, FlowEnqueueResult, QueueSettingOptions } from './client-options.js';
import { ReadRouting } from './read-routing.js';
import { resultWaitOptions, resultWaitSource, ResultWaits, type ResultOptions } from './result-wait.js';

// AwaClient, the handle an application holds: migrate, enqueue (the producer, src/producer), deliver external
// callbacks, and the operator's reads and actions, each action audited. It owns its pool unless the caller
// passed one.

export class AwaClient {
  readonly schema: Schema;
  readonly pool: pg.Pool;
  private readonly conn: ClientPool;
  /** Where operator reads go: a read replica, or the primary. */
  private readonly reads: ReadRouting;
  /** Every storage operation of this client, bound to its schema once. */
  private readonly store: Storage;
  private readonly producer: Producer;
  private readonly telemetry = new ProducerTelemetry(telemetryScope());
  private readonly audit: AuditTrail;
  private readonly maxPayloadBytes: number;
  /** Where migrate() runs: a direct URL, the client's own URL, the pool passed in, or nowhere (a transaction
   * pooler and no direct URL). */
  private readonly migrateOn: { url: string } | 'pool' | null;
  /** The waits of result(), on a LISTEN session of their own: made at the first call. */
  private resultWaits: ResultWaits | null = null;

  constructor(options: ClientOptions) {
    validatePlainObject('options', options);
    rejectUnknownKeys('options', options, CLIENT_OPTION_KEYS);
    this.schema = resolveSchema(options.schema);
    this.audit = new AuditTrail(options.actor, options.onAudit);
    this.maxPayloadBytes =
      options.maxPayloadBytes === undefined
        ? DEFAULT_MAX_PAYLOAD_BYTES
        : validateInt('maxPayloadBytes', options.maxPayloadBytes, 16, 256 * 1024 * 1024);
    const pooler = validatePooler(options.pooler);
    const session = validateSessionConnectionString(options.sessionConnectionString);
    this.store = ringStorage(this.schema, { pooler });
    this.conn = new ClientPool({ ...options, pooler }, 'awa-client');
    this.pool = this.conn.pool;
    this.reads = new ReadRouting(this.conn, options, pooler);
    this.migrateOn = session
      ? { url: session }
      : pooler === 'transaction'
        ? null
        : this.conn.url === null
          ? 'pool'
          : { url: this.conn.url };
    this.producer = new Producer(this.conn, this.store.producer, this.maxPayloadBytes, this.telemetry);
  }

  /** Applies pending migrations under an advisory lock (safe to run from several processes). On a connection of
   * its own, not bounded by queryTimeoutMs: building an index on a large table, or waiting for another process
   * that is migrating, can take longer. */
  async migrate(): Promise<MigrateResult> {
    const apply = (client: pg.ClientBase) => applyMigrations(client, this.schema);
    const on = this.migrateOn;
    // Its advisory lock is a session's: through a transaction pooler it would stay behind on a server
    // connection that other clients then get, and the unlock would reach another one.
    if (on === null) {
      throw new InvalidOptionError(
        'sessionConnectionString',
        "is required to migrate when pooler is 'transaction': pass a postgres:// URL that reaches PostgreSQL " +
          'directly (migrate holds a session advisory lock), or migrate with a client connected directly',
      );
    }
    return this.conn.wrap('migrate', () =>
      on === 'pool'
        ? withClient(this.pool, this.conn.target, apply)
        : withOwnConnection(on.url, 'awa-migrate', redact(on.url), apply),
    );
  }

  /** Fails with SchemaNotMigratedError unless the schema is at this build's version with this build's functions
   * (SchemaTooNewError when a newer build migrated it): what a tool checks before it reads, so an unmigrated
   * database says "run `awa migrate`" rather than failing on a missing table or function. */
  async assertMigrated(): Promise<void> {
    return this.conn.wrap('assertMigrated', () =>
      withClient(this.pool, this.conn.target, (c) => assertMigrated(c, this.schema)),
    );
  }

  /** What `migrate()` would apply, each migration's rolling-deploy record, and whether the hosts running now
   * (heartbeat younger than `liveMs`, default 30 s) keep working through it. Changes nothing. */
  async migrationPlan(options: { liveMs?: number } = {}): Promise<MigrationPlan> {
    const liveSeconds = Math.max(1, Math.round((options.liveMs ?? 30_000) / 1000));
    return this.conn.wrap('migrationPlan', () =>
      withClient(this.pool, this.conn.target, (c) => migrationPlan(c, this.schema, liveSeconds)),
    );
  }

  /** The SQL `migrate()` would run on an empty database. */
  migrationSql(): string {
    return pendingSql(this.schema);
  }

  /**
   * Enqueues one job; on `client`, inside whatever transaction it has open. Returns its id, and
   * `inserted: false` when the job is unique and another job holds its key (that job's id is returned).
   */
  async enqueue<Args>(
    kind: JobKind<Args> | string,
    args: Args,
    options?: EnqueueOptions,
  ): Promise<EnqueueResult> {
    return this.producer.enqueue(kind, args, options);
  }

  /** Enqueues many jobs in one statement; returns one result per job, in input order (duplicates of unique
   * jobs are skipped, not errors: `inserted: false` with the holder's id). */
  async enqueueMany(
    jobs: readonly JobInput[],
    options?: { client?: pg.ClientBase },
  ): Promise<EnqueueResult[]> {
    return this.producer.enqueueMany(jobs, options);
  }

  /**
   * Bulk enqueue through COPY, streaming: accepts any (async) iterable and holds at most one chunk in
   * memory. All rows commit together. With `client`, the load runs inside that client's open transaction
   * under a savepoint (a failure rolls the load back and leaves the transaction usable); a client with no
   * open transaction is refused with TransactionRequiredError. Unique jobs whose key is held are skipped.
   * Returns how many jobs were inserted and how many were skipped as duplicates.
   */
  async copyEnqueue(
    jobs: Iterable<JobInput> | AsyncIterable<JobInput>,
    options: CopyEnqueueOptions = {},
  ): Promise<CopyEnqueueResult> {
    return this.producer.copyEnqueue(jobs, options);
  }

  /** Enqueues a flow: jobs that run after the jobs they depend on, written in one statement (on `client`, inside
   * its open transaction). Returns the flow's id and each job's id by its name. See docs/flows.md,
   * "Dependencies". */
  async enqueueFlow(flow: FlowInput, options?: { client?: pg.ClientBase }): Promise<FlowEnqueueResult> {
    const { flowId, ids } = await this.producer.enqueueFlow(flow, options);
    return { flowId, jobs: Object.fromEntries(flow.jobs.map((j, i) => [j.name, ids[i]!])) };
  }

  /** A flow with each of its jobs' state and dependencies, or null when there is no such flow (or it was
   * removed with its history). */
  async getFlow(flowId: string): Promise<FlowRecord | null> {
    const id = validateJobId('flowId', flowId);
    return this.read('getFlow', (db) => this.store.reads.flowState(db, id));
  }

  /** A page of flows, newest first (pass the last flowId shown as `beforeId`), each with its name and size. */
  async listFlows(options: { beforeId?: string; limit?: number } = {}): Promise<FlowSummary[]> {
    const limit = options.limit === undefined ? 50 : validateInt('limit', options.limit, 1, 1000);
    const beforeId = options.beforeId === undefined ? undefined : validateJobId('beforeId', options.beforeId);
    return this.read('listFlows', (db) => this.store.reads.flowList(db, { beforeId, limit }));
  }

  /** Cancels every job of the flow that has not ended (blocked, waiting, running); audited. Returns how many it
   * cancelled, or null when there is no such flow. */
  async cancelFlow(
    flowId: string,
    reason = 'flow cancelled',
    options?: ActorOptions,
  ): Promise<number | null> {
    const id = validateJobId('flowId', flowId);
    return this.audited('cancelFlow', this.actorOf(options), (db, by) =>
      this.store.actions.cancelFlow(db, id, reason, by),
    );
  }

  /** Pauses a queue fleet-wide: hosts stop claiming its jobs (running ones finish); enqueues are still
   * accepted. Returns false when it was paused already. Audited, like every operator action. A queue nothing
   * names yet (no job, worker, setting or history) is refused with UnknownQueueError unless `create` (pausing a
   * new queue before its first job). */
  async pauseQueue(queue: string, options?: QueueSettingOptions): Promise<boolean> {
    validateName('queue', queue);
    const by = this.actorOf(options, ['create']);
    const create = createOption(options);
    return this.audited('pauseQueue', by, (db, by) =>
      this.store.actions.setQueuePaused(db, queue, true, by, create),
    );
  }

  /** Resumes a paused queue; hosts are woken at once. Returns false when it was not paused. An unknown queue is
   * refused as by pauseQueue(). */
  async resumeQueue(queue: string, options?: QueueSettingOptions): Promise<boolean> {
    validateName('queue', queue);
    const by = this.actorOf(options, ['create']);
    const create = createOption(options);
    return this.audited('resumeQueue', by, (db, by) =>
      this.store.actions.setQueuePaused(db, queue, false, by, create),
    );
  }

  /** Removes a queue that holds nothing: its settings (pause, shards) and lanes, so it leaves the lists (its
   * failed and cancelled history stays until retention, and keeps it listed until then). Refused with
   * QueueInUseError while it holds a job that has not finished or a DLQ entry, while a worker host heard from
   * within `liveMs` (default 30 s) serves it, or while a producer is enqueueing into it; UnknownQueueError for a
   * queue nothing names. A later enqueue creates it afresh. */
  async removeQueue(queue: string, options?: { liveMs?: number } & ActorOptions): Promise<QueueRemoval> {
    validateName('queue', queue);
    const by = this.actorOf(options, ['liveMs']);
    const liveMs =
      options?.liveMs === undefined ? 30_000 : validateInt('liveMs', options.liveMs, 1_000, 86_400_000);
    const removed = await this.audited('removeQueue', by, (db, by) =>
      this.store.actions.removeQueue(db, queue, liveMs / 1000, by),
    );
    // Its lanes are gone: the next enqueue prepares them again, outside the caller's transaction.
    this.producer.forgetLanes(queue);
    return removed;
  }

  /**
   * Splits a queue into `shards` lanes per priority (1..64; 1, the default, is strict FIFO per priority).
   * Producers spread their jobs over the shards in turn and claimers skip a shard another claimer holds, so up
   * to `shards` worker hosts claim the queue side by side; FIFO then holds per shard. Lowering it stops
   * producers using the higher shards; their jobs still run. Returns the previous count. See
   * docs/configuration.md, "Enqueue shards". An unknown queue is refused as by pauseQueue(), unless `create`.
   */
  async setEnqueueShards(queue: string, shards: number, options?: QueueSettingOptions): Promise<number> {
    validateName('queue', queue);
    const n = validateInt('shards', shards, 1, MAX_ENQUEUE_SHARDS);
    const by = this.actorOf(options, ['create']);
    const create = createOption(options);
    return this.audited('setEnqueueShards', by, (db, by) =>
      this.store.actions.setEnqueueShards(db, queue, n, by, create),
    );
  }

  /** The limits of every queue that has any, or of one, and what they hold now: running attempts and jobs
   * waiting at the gate, overall and for the `keys` busiest keys (default 20). See docs/flow-control.md. */
  async queueLimits(options: { queue?: string; keys?: number } = {}): Promise<QueueLimitsState[]> {
    const queue = options.queue === undefined ? null : validateName('queue', options.queue);
    const keys = options.keys === undefined ? 20 : validateInt('keys', options.keys, 0, 1_000);
    return this.read('queueLimits', (db) => this.store.reads.queueLimits(db, queue, keys));
  }

  /** Overrides a queue's declared limits, field by field (a null field or section removes the declared one);
   * `null` clears the override. Applies to the fleet's next claims. Returns the limits now in effect. An
   * unknown queue is refused as by pauseQueue(), unless `create`. */
  async setQueueLimits(
    queue: string,
    override: LimitsOverride | null,
    options?: QueueSettingOptions,
  ): Promise<QueueLimits | null> {
    validateName('queue', queue);
    const valid = override === null ? null : validateLimitsOverride('limits', override);
    const by = this.actorOf(options, ['create']);
    const create = createOption(options);
    return this.audited('setQueueLimits', by, (db, by) =>
      this.store.actions.setLimitsOverride(db, queue, valid, by, create),
    );
  }

  /** Delivers an external callback that completes the job (parked) or resumes its waiting handler with
   * `payload` (waiting in its handler). See docs/callbacks.md for every outcome. */
  async completeExternal(token: string, payload?: unknown): Promise<CallbackDelivery> {
    return this.deliver(token, 'complete', payload, null, null);
  }

  /** Fails the job for good (failed, or the DLQ of a DLQ queue); a waiting handler gets an ExternalFailure,
   * which fails the job unless the handler catches it. */
  async failExternal(token: string, error: string, payload?: unknown): Promise<CallbackDelivery> {
    return this.deliver(token, 'fail', payload, null, error);
  }

  /** Retries the job after `delayMs` (default: the backoff rule), the attempt counted. */
  async retryExternal(
    token: string,
    options: { delayMs?: number; error?: string } = {},
  ): Promise<CallbackDelivery> {
    const runAt =
      options.delayMs === undefined
        ? null
        : new Date(Date.now() + validateInt('delayMs', options.delayMs, 0, 365 * 86_400_000));
    return this.deliver(token, 'retry', undefined, runAt, options.error ?? 'retry requested by callback');
  }

  /** Cancels the job for good. */
  async cancelExternal(token: string, reason = 'cancelled by callback'): Promise<CallbackDelivery> {
    return this.deliver(token, 'cancel', undefined, null, reason);
  }

  /** Runs the handler again (same attempt) with `payload` on job.callback, or hands it to a waiting handler. */
  async resumeExternal(token: string, payload?: unknown): Promise<CallbackDelivery> {
    return this.deliver(token, 'resume', payload, null, null);
  }

  private deliver(
    token: string,
    action: CallbackAction,
    payload: unknown,
    runAt: Date | null,
    error: string | null,
  ): Promise<CallbackDelivery> {
    if (
      typeof token !== 'string' ||
      !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(token)
    ) {
      throw new InvalidOptionError(
        'token',
        `must be a callback token (a UUID), got ${JSON.stringify(token)}`,
      );
    }
    const json =
      payload === undefined ? null : encodeArgs('callback', payload, this.maxPayloadBytes, 'payload');
    const record = error === null ? null : { at: new Date().toISOString(), error, name: 'ExternalCallback' };
    // A callback is the job's external system answering, not an operator action, unless this client acts for
    // someone (the CLI's `awa callback`).
    const by = this.audit.auditsCallbacks ? this.actorOf(undefined) : null;
    return this.audited(
      `callback ${action}`,
      by ?? this.actorOf(undefined),
      async (db) => {
        const delivery = await this.store.actions.resolveCallback(db, token, action, json, runAt, record, by);
        this.telemetry.callbackDelivered(action, delivery.value);
        return delivery;
      },
      false,
    );
  }

  /** Per-queue health: counts, completions and failures in the last `windowMs` (default 5 min), the age of
   * the oldest available job, pause state, and whether the queue is in the ring's oldest slot. Cheap to poll. */
  async queueHealth(options: { windowMs?: number } = {}): Promise<QueueHealth[]> {
    const windowMs =
      options.windowMs === undefined ? 300_000 : validateInt('windowMs', options.windowMs, 1_000, 86_400_000);
    return this.read('queueHealth', (db) => this.store.reads.queueHealth(db, windowMs / 1000));
  }

  /** A page of jobs in one state (see JobListFilter for the paging keys). */
  async listJobs(filter: Omit<JobListFilter, 'limit'> & { limit?: number }): Promise<JobSummary[]> {
    const valid = jobListFilter(filter);
    return this.read('listJobs', (db) => this.store.reads.listJobs(db, valid));
  }

  /** When the completions of a queue (or of all) that are kept only in compact history closed: those keep no
   * kind or args, so a kind filter on completed jobs cannot find them. Null when there are none. */
  async compactHistorySpan(queue?: string): Promise<{ oldest: Date; newest: Date } | null> {
    if (queue !== undefined) validateName('queue', queue);
    return this.read('compactHistorySpan', (db) => this.store.reads.compactHistorySpan(db, queue ?? null));
  }

  /** Runs a failed, cancelled, dead-lettered, scheduled or retryable job again now (fresh attempt counter
   * for ended ones). Says the state it was retried from, or why it was not: no such job (or past
   * retention), a state there is nothing to retry from, or a unique key another job holds now. */
  async retryJob(job: string | { id: string }, options?: ActorOptions): Promise<RetryOutcome> {
    const id = validateJobId('id', job);
    return this.audited('retryJob', this.actorOf(options), (db, by) =>
      this.store.actions.retryJob(db, id, by),
    );
  }

  /** Worker processes that registered, newest first, with their snapshot; `live` when heard from within
   * `liveMs` (default 30 s) and not stopped. */
  async runtimeList(options: { liveMs?: number } = {}): Promise<RuntimeInstance[]> {
    const liveMs =
      options.liveMs === undefined ? 30_000 : validateInt('liveMs', options.liveMs, 1_000, 86_400_000);
    return this.read('runtimeList', (db) => this.store.reads.runtimeList(db, liveMs / 1000));
  }

  /** Queue and kind descriptors as live hosts report them, with stale and drift flags. */
  async descriptors(options: { liveMs?: number } = {}): Promise<Descriptor[]> {
    const liveMs =
      options.liveMs === undefined ? 120_000 : validateInt('liveMs', options.liveMs, 1_000, 86_400_000);
    return this.read('descriptors', (db) => this.store.reads.descriptors(db, liveMs / 1000));
  }

  /** Sizes, live and dead tuples of the schema's tables (ring families summed over their slots). Read on the
   * primary even with a readConnectionString: a standby's table statistics count its own activity, not the
   * primary's, and would show every table empty. */
  async storageStatus(): Promise<StorageFamily[]> {
    return this.run('storageStatus', undefined, (db) => this.store.reads.storageStatus(db));
  }

  async counts(): Promise<QueueCounts[]> {
    return this.read('counts', (db) => this.store.reads.queueCounts(db));
  }

  /** The ring's slots that hold rows, oldest first, and what keeps the oldest from being pruned. On the primary,
   * as storageStatus(). */
  async ringStatus(): Promise<RingSlot[]> {
    return this.run('ringStatus', undefined, (db) => this.store.reads.ringStatus(db));
  }

  async getJob(job: string | { id: string }): Promise<JobRecord | null> {
    const id = validateJobId('id', job);
    return this.read('getJob', (db) => this.store.reads.jobState(db, id));
  }

  /**
   * Waits for job `job` to end and resolves with its result: what its handler returned (null when it returned
   * nothing), at once when it has completed already. Rejects with JobNotCompletedError when it failed, went to the
   * DLQ or was cancelled, JobNotFoundError when no such job is known (or its history passed retention), and
   * ResultTimeoutError after `timeoutMs` (default 60 s). Woken by NOTIFY on a LISTEN session of this client's own
   * (its connection string, or sessionConnectionString behind a transaction pooler), opened at the first call and
   * shared by all. Pass the job's kind first to have the result typed by it. See docs/flows.md, "Results".
   */
  async result<R = unknown>(job: string | { id: string }, options?: ResultOptions): Promise<R>;
  async result<R>(
    kind: Pick<JobKind<unknown, R>, 'kind' | '~result'>,
    job: string | { id: string },
    options?: ResultOptions,
  ): Promise<R>;
  async result(...args: unknown[]): Promise<unknown> {
    const [job, options] = resultWaitOptions(args);
    // Behind a transaction pooler with no direct URL there is no session to LISTEN on: refused, not polled.
    const source = resultWaitSource(this.migrateOn, this.pool);
    this.resultWaits ??= new ResultWaits(source, this.store.results, (op, fn) => this.run(op, undefined, fn));
    return this.resultWaits.wait(job, options.timeoutMs);
  }

  /** The newest progress an attempt of job `id` recorded, while it is held (usually until the attempt
   * closes), or null. */
  async jobProgress(job: string | { id: string }): Promise<JobProgress | null> {
    const id = validateJobId('id', job);
    return this.read('jobProgress', (db) => this.store.reads.jobProgress(db, id));
  }

  /** The durable steps job `id` recorded (ctx.step, and ctx.sleep's wake times), oldest first, with their values;
   * empty once its history is gone (docs/durable-steps.md). */
  async jobSteps(job: string | { id: string }): Promise<RecordedStep[]> {
    const id = validateJobId('id', job);
    return this.read('jobSteps', (db) => this.store.reads.jobSteps(db, id));
  }

  /**
   * Cancels a job wherever it is: scheduled or waiting jobs never run; a running attempt is closed (its
   * late result is ignored) and its handler's signal aborts through a notification to its worker.
   * Returns the state it was cancelled from, or null when it had already finished.
   */
  async cancel(
    job: string | { id: string },
    reason = 'cancelled by operator',
    options?: ActorOptions,
  ): Promise<CancelledFrom | null> {
    const id = validateJobId('id', job);
    return this.audited('cancel', this.actorOf(options), (db, by) =>
      this.store.actions.cancelJob(db, id, reason, by),
    );
  }

  async listDlq(options: { queue?: string; limit?: number } = {}): Promise<DlqEntry[]> {
    const limit = options.limit === undefined ? 100 : validateInt('limit', options.limit, 1, 100_000);
    return this.read('listDlq', (db) => this.store.reads.dlqList(db, { queue: options.queue, limit }));
  }

  /** A page of DLQ entries of a queue or kind (or all), newest first: pass the last id shown as `beforeId` for
   * the next page. Each says why it went there (`reason`), without its args or error history. */
  async dlqPage(
    filter: { queue?: string; kind?: string; beforeId?: string; limit?: number } = {},
  ): Promise<DlqSummary[]> {
    const valid = dlqPageFilter(filter);
    return this.read('dlqPage', (db) => this.store.reads.dlqPage(db, valid));
  }

  /** How many DLQ entries there are, of a queue or kind (or all), counted up to `atMost` (default 10,000) so the
   * read stays bounded however large the DLQ grows: `capped` says the count stopped there. */
  async countDlq(
    filter: { queue?: string; kind?: string } = {},
    options: { atMost?: number } = {},
  ): Promise<DlqCount> {
    dlqCountFilter(filter);
    const atMost =
      options.atMost === undefined ? 10_000 : validateInt('atMost', options.atMost, 1, 1_000_000_000);
    const count = await this.read('countDlq', (db) => this.store.reads.dlqCount(db, filter, atMost));
    return { count, capped: count >= atMost };
  }

  /** Moves DLQ entries back to their queue with a fresh attempt counter; returns the ids moved. */
  async retryDlq(ids: readonly string[], options?: ActorOptions): Promise<string[]> {
    const moved = await this.audited('retryDlq', this.actorOf(options), (db, by) =>
      this.store.actions.dlqRetry(db, ids, by),
    );
    this.telemetry.dlqRetriedCount(moved.length);
    return moved;
  }

  /** Deletes DLQ entries: these ids, or those of a queue (or all) that went to the DLQ before `before`. With
   * `dryRun`, deletes nothing (and records nothing) and returns how many would go. */
  async purgeDlq(target: DlqTarget, options: { dryRun?: boolean } & ActorOptions = {}): Promise<number> {
    dlqTarget(target);
    const by = this.actorOf(options, ['dryRun']);
    if (options.dryRun) return this.read('purgeDlq', (db) => this.store.reads.dlqCount(db, target));
    const purged = await this.audited('purgeDlq', by, (db, by) =>
      this.store.actions.dlqPurge(db, target, by),
    );
    this.telemetry.dlqPurgedCount(purged);
    return purged;
  }

  /** Cron schedules with their state and next fire time. A schedule is `undeclared` when no instance that
   * heartbeated within `stalenessMs` (default 30 s) declares it. */
  async listCron(options: { stalenessMs?: number } = {}): Promise<CronSchedule[]> {
    const staleness =
      options.stalenessMs === undefined
        ? 30_000
        : validateInt('stalenessMs', options.stalenessMs, 1_000, 86_400_000);
    return this.read('listCron', (db) => listCronSchedules(db, this.store, staleness));
  }

  /** Pauses a cron schedule: no occurrence fires until it is resumed (a fire in flight commits first).
   * Returns false when it was paused already. */
  async pauseCron(name: string, options?: ActorOptions): Promise<boolean> {
    return this.audited('pauseCron', this.actorOf(options), (db, by) =>
      setSchedulePaused(db, this.store, name, true, by),
    );
  }

  /** Resumes a paused schedule from now on: occurrences that fell due while it was paused do not fire.
   * Returns false when it was not paused. */
  async resumeCron(name: string, options?: ActorOptions): Promise<boolean> {
    return this.audited('resumeCron', this.actorOf(options), (db, by) =>
      setSchedulePaused(db, this.store, name, false, by),
    );
  }

  /** Enqueues one job of the schedule now (meta.cron.manual = true), paused or not; its fire times are
   * unaffected. */
  async triggerCron(name: string, options?: ActorOptions): Promise<CronTriggerResult> {
    return this.audited('triggerCron', this.actorOf(options), (db, by) =>
      triggerSchedule(db, this.store, name, by),
    );
  }

  /** Deletes a schedule; a host that still declares it creates it again when it next starts. Returns false
   * when there was none. */
  async removeCron(name: string, options?: ActorOptions): Promise<boolean> {
    return this.audited('removeCron', this.actorOf(options), (db, by) =>
      removeSchedule(db, this.store, name, by),
    );
  }

  /** Records an action of your own in the audit trail (the dashboard records its logins this way): `action`
   * is lower-case words joined by dots, dashes or underscores (e.g. `billing.refund`). */
  async recordAudit(
    entry: { action: string; target?: string | null; detail?: Record<string, unknown> | null },
    options?: ActorOptions,
  ): Promise<AuditRecord> {
    const { action, target, detail } = auditEntry(entry);
    return this.audited('recordAudit', this.actorOf(options), async (db, by) => {
      const record = await this.store.actions.auditInsert(db, { by, action, target }, detail);
      return { value: record, record };
    });
  }

  /** A page of the audit trail, newest first: pass the last record's id as `beforeId` for the next page. */
  async auditLog(filter: AuditFilter = {}): Promise<AuditRecord[]> {
    const page = auditFilter(filter);
    return this.read('auditLog', (db) => this.store.reads.auditPage(db, page));
  }

  /** Where this client's operator reads go: 'replica' with a readConnectionString, else 'primary'. */
  get readsFrom(): 'primary' | 'replica' {
    return this.reads.readsFrom;
  }

  /** Where this client's reads are served and how far they lag the primary: with a readConnectionString, the
   * standby's replay delay (0 when it has replayed all the primary has written); without one, the primary. */
  async readLag(): Promise<ReadLag> {
    return this.reads.lag();
  }

  /** Ends the client's own pools (a pool passed in stays the caller's). Safe to call more than once; every
   * call after the first waits for the same end. Calls made after it fail with ClientClosedError. */
  async close(): Promise<void> {
    await this.resultWaits?.close();
    await Promise.all([this.conn.close(), this.reads.close()]);
  }

  private actorOf(options: ActorOptions | undefined, extraKeys: readonly string[] = []): Actor {
    return this.audit.actorOf(options, extraKeys);
  }

  /** Runs an operator action whose storage call writes its audit record, then reports the record. Unless told
   * otherwise (a callback delivery: no one reads its result next), waits for the read replica to show it. */
  private async audited<T>(
    op: string,
    by: Actor,
    fn: (db: pg.Pool | pg.ClientBase, by: Actor) => Promise<Audited<T>>,
    readsCatchUp = true,
  ): Promise<T> {
    const { value, record } = await this.run(op, undefined, (db) => fn(db, by));
    if (record) this.audit.report(record);
    if (readsCatchUp) await this.reads.catchUp(op);
    return value;
  }

  /** A read on the read replica when there is one, else on the primary. */
  private read<T>(op: string, fn: (db: pg.Pool | pg.ClientBase) => Promise<T>): Promise<T> {
    return this.reads.read(op, fn);
  }

  private run<T>(
    op: string,
    client: pg.ClientBase | undefined,
    fn: (db: pg.Pool | pg.ClientBase) => Promise<T>,
  ): Promise<T> {
    return this.conn.run(op, client, fn);
  }
}
