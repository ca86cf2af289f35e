import type { SpanContext } from '@opentelemetry/api';
import type pg from 'pg';
import { AwaError, EventLoopBlockedError, UnknownKindError } from '../model/errors.js';
import type { JobHandler } from '../model/job.js';
import type { JobKind } from '../model/job-kind.js';
import {
  assertMigrated,
  callbackResult,
  claimJobs,
  withClient,
  wrapDatabaseError,
  createPool,
  listenFromBirth,
  ensureLanes,
  isConnectionLoss,
  markStopped,
  queueHealth,
  redact,
  registerCallback,
  writeProgress,
  type ClaimBatch,
  type ClaimResult,
  type ClaimedJob,
} from '../storage/index.js';
import type { Attempt } from './attempts.js';
import { AttemptTracker } from './attempts.js';
import { CallbackWaits } from './callback-waits.js';
import type { CompletionBatcher } from './completion-batcher.js';
import { syncCronDefinitions } from './cron.js';
import { resolveHostConfig, type HostConfig, type WorkerOptions } from './config.js';
import { Dispatcher } from './dispatcher.js';
import { jobContext, type ContextDeps } from './job-context.js';
import { jobView } from './job-view.js';
import { MaintenanceLeader } from './leader.js';
import { Liveness } from './liveness.js';
import { decide, errorRecord } from './outcome.js';
import { HandlerRegistry, type HandlerEntry } from './registry.js';
import { LoopWatch } from './loop-watch.js';
import type { PoolExecutor } from './pool-executor.js';
import { ProgressWriter } from './progress-writer.js';
import { ReceiptBook } from './receipt-book.js';
import { HostStats } from './stats.js';
import {
  ConsumerTelemetry,
  HostGauges,
  MaintenanceTelemetry,
  runInSpan,
  telemetryScope,
  type HostSettlement,
  type TelemetryScope,
} from './telemetry/index.js';
import { settlesWithin } from './settles-within.js';
import { startThreadPoolKinds } from './thread-pool-kinds.js';
import { Wakeup } from './wakeup.js';
import { hostDescriptors } from './host-descriptors.js';
import { HostEmitter } from './host-events.js';
import { resultBatcher, settlementOf } from './host-results.js';

// The worker host: the main-thread coordinator of one process. It owns every database conversation
// (claims through the dispatchers, results through the completion batcher, the LISTEN connection, the
// maintenance leader, the liveness heartbeat) and runs handlers inline, or hands kinds declared
// `execution: 'pool'` to the worker-thread pool.

type State = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

/** What a handler's signal is aborted with when its attempt passes the kind's deadline. */
export class DeadlineExceeded extends Error {
  constructor(kind: string, ms: number) {
    super(`job kind "${kind}" exceeded its ${ms} ms deadline`);
    this.name = 'DeadlineExceeded';
  }
}

export class WorkerHost extends HostEmitter {
  readonly config: HostConfig;
  readonly stats = new HostStats();
  private readonly registry = new HandlerRegistry();
  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly dispatchers = new Map<string, Dispatcher>();
  private readonly batcher: CompletionBatcher<HostSettlement>;
  private readonly attempts = new AttemptTracker();
  private readonly progress: ProgressWriter;
  private readonly receipts = new ReceiptBook();
  private readonly callbackWaits: CallbackWaits;
  private readonly contextDeps: ContextDeps;
  private readonly liveness: Liveness;
  private readonly leader: MaintenanceLeader | null;
  private readonly wakeup: Wakeup;
  private readonly warnedKinds = new Set<string>();
  private state: State = 'new';
  private starting: Promise<void> | null = null;
  private stopping: Promise<void> | null = null;
  private executor: PoolExecutor | null = null;
  private readonly scope: TelemetryScope = telemetryScope();
  private readonly telemetry: ConsumerTelemetry;
  private gauges: HostGauges | null = null;
  /** Reports a stall of the event loop as long as two heartbeat intervals (at least 1 s). */
  private readonly loopWatch: LoopWatch;
  /** The receive span of each claim batch that recorded one, for its attempts' spans to link to. */
  private readonly claimSpans = new WeakMap<ClaimBatch, SpanContext>();

  constructor(options: WorkerOptions) {
    super();
    this.config = resolveHostConfig(options);
    const c = this.config;
    this.loopWatch = new LoopWatch(Math.max(1_000, 2 * c.heartbeatIntervalMs), (stalledMs) =>
      this.reportError(
        new EventLoopBlockedError(stalledMs, c.heartbeatStalenessMs, this.registry.inlineKinds()),
      ),
    );
    this.ownsPool = !c.pool;
    this.pool = c.pool ?? createPool(c.connectionString!, c.poolSize, 'awa-worker', c.queryTimeoutMs);
    if (c.pool) listenFromBirth(c.pool);
    const source = {
      connectionString: c.connectionString,
      pool: this.pool,
      queryTimeoutMs: c.queryTimeoutMs,
    };
    this.telemetry = new ConsumerTelemetry(
      this.scope,
      new Set([...c.queues].filter(([, q]) => q.dlq).map(([queue]) => queue)),
    );
    this.batcher = resultBatcher(
      {
        pool: this.pool,
        schema: c.schema,
        telemetry: this.telemetry,
        onFlushed: (items, accepted) => this.onFlushed(items, accepted),
        onError: (err) => this.reportError(err),
      },
      c.completionBatchSize,
      c.completionFlushMs,
    );
    for (const [queue, q] of c.queues) {
      this.dispatchers.set(
        queue,
        new Dispatcher(queue, q.concurrency, c.claimBatchSize, c.pollIntervalMs, q.prefetch, {
          claim: (name, max) => this.claim(name, max),
          execute: (name, batch, job) => this.execute(name, batch, job),
          handBack: (name, batch, job) => this.handBack(name, batch, job),
          backpressure: () => this.batcher.backlog > c.completionBatchSize * 8,
          onError: (err) => this.reportError(err),
        }),
      );
    }
    this.progress = new ProgressWriter(
      (w) => writeProgress(this.pool, c.schema, w),
      (err) => this.reportError(err),
    );
    this.callbackWaits = new CallbackWaits(
      (jobId, runLease) => callbackResult(this.pool, c.schema, jobId, runLease),
      (err) => this.reportError(err),
      () => this.telemetry.waitTimedOut(),
    );
    this.contextDeps = {
      reportProgress: (w) => this.progress.report(w),
      registerCallback: (a, timeoutMs) => registerCallback(this.pool, c.schema, a, timeoutMs),
      callbackRegistered: (attempt) => this.telemetry.registeredCallback(attempt.queue, attempt.job.kind),
      waitForCallback: (jobId, runLease, timeoutMs, signal) =>
        this.callbackWaits.wait(jobId, runLease, timeoutMs, signal),
    };
    this.liveness = new Liveness(
      this.pool,
      {
        schema: c.schema,
        instanceId: c.instanceId,
        queues: [...c.queues].map(([queue, q]) => ({ queue, dlq: q.dlq, concurrency: q.concurrency })),
        heartbeatIntervalMs: c.heartbeatIntervalMs,
        snapshotIntervalMs: c.snapshotIntervalMs,
        sweepMs: c.heartbeatStalenessMs,
      },
      this.receipts,
      {
        snapshot: () => ({
          inFlight: this.attempts.size,
          isLeader: this.isLeader,
          leaderPid: this.leader?.leaderPid ?? null,
        }),
        descriptors: () => hostDescriptors(this.config.queues, this.registry.entries()),
      },
      (err) => this.reportError(err),
    );
    this.wakeup = new Wakeup(
      source,
      c.schema,
      {
        onQueue: (queue) => this.dispatchers.get(queue)?.notified(),
        onCancel: (jobId, runLease) => this.closedElsewhere(jobId, runLease),
        onCallback: (jobId, runLease) => this.callbackWaits.notified(jobId, runLease),
      },
      () => {
        this.wakeAll();
        this.callbackWaits.recheckAll();
      },
      (err) => this.reportError(err),
    );
    this.leader = c.maintenance
      ? new MaintenanceLeader(
          source,
          {
            schema: c.schema,
            instanceId: c.instanceId,
            electionIntervalMs: c.leaderElectionIntervalMs,
            promoteIntervalMs: c.promoteIntervalMs,
            ringIntervalMs: c.ringIntervalMs,
            ringSlotMinRows: c.ringSlotMinRows,
            ringSlotMaxAgeMs: c.ringSlotMaxAgeMs,
            completedRetentionMs: c.completedRetentionMs,
            rescueIntervalMs: c.rescueIntervalMs,
            callbackTimeoutIntervalMs: c.callbackTimeoutIntervalMs,
            heartbeatStalenessMs: c.heartbeatStalenessMs,
            failedRetentionMs: c.failedRetentionMs,
            dlqRetentionMs: c.dlqRetentionMs,
            auditRetentionMs: c.auditRetentionMs,
            ringCarryLimit: c.ringCarryLimit,
            ringCarryAfterSlots: c.ringCarryAfterSlots,
            cronIntervalMs: c.cronIntervalMs,
            cronMissedAfterMs: c.cronMissedAfterMs,
            stopTimeoutMs: STOP_STEP_MS,
          },
          {
            onLeadership: (isLeader) => this.notify('leadership', isLeader),
            onPrune: (result) => this.notify('prune', result),
            onRescue: (rescued) => this.notify('rescue', rescued),
            onCron: (fires) => this.notify('cron', fires),
            onError: (err) => this.reportError(err),
          },
          new MaintenanceTelemetry(this.scope),
        )
      : null;
  }

  /** Registers the handler for a kind. Call before start(). */
  register<Args>(kind: JobKind<Args>, handle: JobHandler<Args>): this {
    this.registry.add(kind, handle);
    return this;
  }

  registerAll(entries: readonly HandlerEntry<never>[]): this {
    for (const e of entries) this.registry.add(e.kind as JobKind<unknown>, e.handle as JobHandler<unknown>);
    return this;
  }

  get isLeader(): boolean {
    return this.leader?.isLeader ?? false;
  }

  /** Jobs running right now, across queues. */
  get inFlight(): number {
    return this.attempts.size;
  }

  /** Checks the database and schema, then starts listening, claiming and standing for leadership. */
  async start(): Promise<void> {
    if (this.state !== 'new')
      throw new AwaError('AWA_HOST_STATE', `start() called on a host that is ${this.state}`);
    this.state = 'starting';
    this.starting = this.startUp();
    await this.starting;
  }

  private async startUp(): Promise<void> {
    const target = this.config.connectionString ? redact(this.config.connectionString) : 'the given pool';
    try {
      await this.startThreadPool();
      try {
        await withClient(this.pool, target, async (client) => {
          await assertMigrated(client, this.config.schema);
          await ensureLanes(client, this.config.schema, [...this.config.queues.keys()]);
          await this.liveness.register(client);
          const c = this.config;
          await syncCronDefinitions(client, c.schema, c.instanceId, c.cron, c.heartbeatStalenessMs);
        });
        await this.wakeup.start();
      } catch (err) {
        // A statement that failed or went unanswered says so as a typed error; Awa's own pass through.
        throw wrapDatabaseError('start', err, target);
      }
    } catch (err) {
      this.state = 'stopped';
      await this.executor?.close().catch(() => {});
      if (this.ownsPool) await this.pool.end().catch(() => {});
      throw err;
    }
    this.state = 'running';
    this.gauges = this.hostGauges();
    this.loopWatch.start();
    this.liveness.start();
    for (const d of this.dispatchers.values()) d.start();
    this.leader?.start();
  }

  /**
   * Graceful stop: stop claiming → let running jobs finish (up to shutdownTimeoutMs, then abort their
   * signals) → flush results → release leadership → close connections. Jobs still running at the end
   * keep open receipts and are rescued later; nothing is lost. Every database step after the drain is
   * bounded, so stop() returns within shutdownTimeoutMs plus a few seconds whatever the database is doing
   * (and a start() still under way, which finishes first). Every call resolves when the one stop has ended.
   */
  stop(): Promise<void> {
    // Every caller waits for the same stop, not just the first.
    this.stopping ??= this.shutDown();
    return this.stopping;
  }

  private async shutDown(): Promise<void> {
    // A start under way finishes first (or fails and cleans up after itself); stopping under it would leave
    // whatever it starts afterwards running.
    await this.starting?.catch(() => {});
    if (this.state === 'stopped') return;
    if (this.state === 'new') {
      // Never started: nothing runs and nothing is registered; only a pool of its own to end.
      this.state = 'stopped';
      if (this.ownsPool) await this.pool.end().catch(() => {});
      return;
    }
    this.state = 'stopping';
    this.gauges?.stop();
    this.loopWatch.stop();
    this.gauges = null;
    for (const d of this.dispatchers.values()) d.stopClaiming();
    const idle = Promise.all([...this.dispatchers.values()].map((d) => d.idle()));
    const drained = await settlesWithin(idle, this.config.shutdownTimeoutMs);
    if (!drained) this.attempts.abortAll(new Error('worker host is stopping'));
    // Pool jobs answer their abort within threadPool.graceMs or their thread is terminated (→ retry).
    await this.executor?.close().catch((err: unknown) => this.reportError(err));
    await settlesWithin(this.batcher.drain(), Math.max(this.config.shutdownTimeoutMs, STOP_STEP_MS));
    // Handlers that ignored their abort may still return; their receipts stay open for rescue.
    this.batcher.close();
    await settlesWithin(this.progress.flush(), STOP_STEP_MS);
    await settlesWithin(this.liveness.stop(), STOP_STEP_MS);
    // Receipts still open now belong to handlers that did not finish: mark this instance stopped so
    // the leader rescues them at once instead of waiting out the staleness window.
    await settlesWithin(
      markStopped(this.pool, this.config.schema, this.config.instanceId).catch((err: unknown) =>
        this.reportError(err),
      ),
      STOP_STEP_MS,
    );
    await this.leader?.stop();
    await settlesWithin(this.wakeup.stop(), STOP_STEP_MS);
    if (this.ownsPool)
      await settlesWithin(
        this.pool.end().catch(() => {}),
        STOP_STEP_MS,
      );
    this.state = 'stopped';
  }

  /** Starts the worker-thread pool, if configured, and registers its kinds. */
  private async startThreadPool(): Promise<void> {
    if (!this.config.threadPool) return;
    this.executor = await startThreadPoolKinds(this.config.threadPool, this.registry, {
      log: (jobId, line) => {
        if (this.listenerCount('log') > 0) this.notify('log', jobId, line);
        else console.error(`[awa] job ${jobId}: ${line}`);
      },
      progress: (jobId, runLease, value) => this.notify('progress', jobId, runLease, value),
      error: (err) => this.reportError(err),
    });
  }

  /** The observable instruments: this host's health, and queue health while it leads. */
  private hostGauges(): HostGauges {
    const c = this.config;
    return new HostGauges(
      this.scope,
      {
        queues: () => {
          const running = this.attempts.byQueue();
          return [...c.queues].map(([queue, q]) => ({
            queue,
            running: running.get(queue) ?? 0,
            capacity: q.concurrency,
            held: this.dispatchers.get(queue)!.waiting,
          }));
        },
        backlog: () => this.batcher.backlog,
        isLeader: () => this.isLeader,
        queueHealth: () => queueHealth(this.pool, c.schema, 60),
      },
      (err) => this.reportError(err),
    );
  }

  private async claim(queue: string, max: number): Promise<ClaimResult> {
    await this.liveness.beforeClaim(queue);
    const startedAtMs = Date.now();
    const startedAt = performance.now();
    let result: ClaimResult;
    // On the wake-up connection when it is free: that is where the notification behind a pickup came from.
    const lent = this.wakeup.lend();
    let failure: unknown;
    try {
      result = await claimJobs(lent?.client ?? this.pool, this.config.schema, {
        queue,
        max,
        instanceId: this.config.instanceId,
        agingSeconds: this.config.priorityAgingSeconds,
        deadlineSeconds: Math.ceil(this.config.queues.get(queue)!.deadlineMs / 1000),
      });
    } catch (err) {
      // The connection went away mid-claim: the claim may have committed with its answer lost.
      if (isConnectionLoss(err)) this.liveness.claimLost(queue);
      this.telemetry.claimFailed(queue, startedAt, err);
      failure = err;
      throw err;
    } finally {
      lent?.release(failure);
    }
    this.stats.claimCalls++;
    this.stats.claimMs += performance.now() - startedAt;
    for (const b of result.batches) {
      this.receipts.add(b);
      this.stats.claimed += b.jobs.length;
    }
    const span = this.telemetry.claimed(queue, result, startedAtMs, startedAt);
    if (span) for (const b of result.batches) this.claimSpans.set(b, span);
    return result;
  }

  private execute(queue: string, batch: ClaimBatch, c: ClaimedJob): void {
    const now = Date.now();
    this.stats.recordPickup(now - c.readyAtMs);
    const entry = this.registry.get(c.kind);
    if (!entry) return this.snoozeUnknownKind(queue, batch, c, now);
    const exec = this.telemetry.startProcess(queue, c, this.claimSpans.get(batch) ?? null);
    const attempt = this.attempts.begin(queue, batch, c, exec);
    const ctx = jobContext(attempt, this.contextDeps);
    const deadlineMs = entry.kind.deadlineMs;
    if (deadlineMs > 0) {
      attempt.deadlineTimer = setTimeout(() => {
        const err = new DeadlineExceeded(c.kind, deadlineMs);
        attempt.abort(err);
        // The handler may never return: settle now; whatever it does later is ignored.
        this.complete(attempt, err, true);
      }, deadlineMs);
    }
    try {
      // The handler runs in its span's context, so the spans it starts are the execution's children.
      const result = runInSpan(exec.parent, exec.span, () => entry.handle(jobView(queue, c), ctx));
      // What the handler returned is its own: reading its `then` or calling it may throw too (a revoked
      // proxy, a hostile thenable). That fails this attempt; it must not escape into the claim loop, which
      // would leave the rest of the batch unstarted and holding its permits.
      if (!isThenable(result)) return this.complete(attempt, undefined, false);
      result.then(
        () => this.complete(attempt, undefined, false),
        (err: unknown) => this.complete(attempt, err, true),
      );
    } catch (err) {
      this.complete(attempt, err, true);
    }
  }

  /**
   * The attempt was settled by someone else (operator cancel, rescue): abort its handler and give its
   * permit back now. A handler that ignores its signal keeps running, but no longer holds the queue's
   * capacity, and whatever it returns is ignored (the fence would reject it anyway).
   */
  private closedElsewhere(jobId: string, runLease: number): void {
    const attempt = this.attempts.abort(jobId, runLease, new Error('attempt cancelled or rescued elsewhere'));
    if (!attempt) return this.forgetHeld(jobId, runLease);
    if (attempt.settled) return;
    attempt.settled = true;
    this.attempts.end(attempt);
    this.receipts.answered(attempt.batch.batchId);
    this.stats.stale++;
    this.telemetry.endProcess(attempt.telemetry, attempt.queue, attempt.job.kind, 'stale', undefined);
    this.telemetry.closedElsewhere(attempt.queue, attempt.job.kind);
    this.dispatchers.get(attempt.queue)!.release();
  }

  /** An attempt closed elsewhere before it started (held for a permit): drop it unstarted. */
  private forgetHeld(jobId: string, runLease: number): void {
    for (const d of this.dispatchers.values()) {
      const held = d.forget(jobId, runLease);
      if (!held) continue;
      this.receipts.answered(held.batch.batchId);
      this.stats.stale++;
      this.telemetry.closedElsewhere(d.queue, held.job.kind);
      return;
    }
  }

  private complete(attempt: Attempt, thrown: unknown, failed: boolean): void {
    if (attempt.settled) return;
    attempt.settled = true;
    this.attempts.end(attempt);
    const c = attempt.job;
    let d = decide(thrown, failed, c.attempt, c.maxAttempts);
    if (d.outcome === 'wait' && !attempt.callbackToken) {
      const err = new Error('WaitForCallback without a callback: call ctx.registerCallback() first');
      err.name = 'InvalidOutcome';
      d = decide(err, true, c.attempt, c.maxAttempts);
      thrown = err;
    }
    this.telemetry.endProcess(attempt.telemetry, attempt.queue, c.kind, d.outcome, thrown);
    this.settle(settlementOf(attempt.queue, attempt.batch, c, d.outcome, d.runAt, d.error));
  }

  /** A kind no handler here knows: snooze it (no attempt spent) so a host that knows it can run it. */
  private snoozeUnknownKind(queue: string, batch: ClaimBatch, c: ClaimedJob, now: number): void {
    if (!this.warnedKinds.has(c.kind)) {
      this.warnedKinds.add(c.kind);
      this.reportError(new UnknownKindError(c.kind, this.registry.kinds(), this.config.unknownKindDelayMs));
    }
    const error = errorRecord(
      new Error(`unknown job kind "${c.kind}" on instance ${this.config.instanceId}`),
      c.attempt,
      now,
    );
    this.settle(
      settlementOf(queue, batch, c, 'snooze', new Date(now + this.config.unknownKindDelayMs), error),
    );
  }

  /** Queues a started job's result for flushing and gives its permit back. */
  private settle(result: HostSettlement): void {
    this.batcher.add(result);
    this.dispatchers.get(result.queue)!.release();
  }

  /** A claimed job that never started goes back to its queue (a snooze: no attempt spent; it held no permit). */
  private handBack(queue: string, batch: ClaimBatch, c: ClaimedJob): void {
    this.batcher.add(settlementOf(queue, batch, c, 'snooze', new Date()));
  }

  private onFlushed(items: readonly HostSettlement[], accepted: Set<string>): void {
    const s = this.stats;
    s.flushes++;
    this.telemetry.flushed(items, accepted);
    const listen = this.listenerCount('settled') > 0;
    for (const item of items) {
      this.receipts.answered(item.batchId);
      const ok = accepted.has(item.jobId);
      if (!ok) s.stale++;
      else if (item.outcome === 'completed') s.completed++;
      else if (item.outcome === 'retry') s.retried++;
      else if (item.outcome === 'failed') s.failed++;
      else if (item.outcome === 'cancelled') s.cancelled++;
      else if (item.outcome === 'wait') s.parked++;
      else s.snoozed++;
      if (listen) this.notify('settled', item, ok);
    }
    if (this.state === 'running') for (const d of this.dispatchers.values()) d.resume();
  }

  private wakeAll(): void {
    if (this.state !== 'running') return;
    for (const d of this.dispatchers.values()) d.wake();
  }
}

/** Upper bound of each database step of stop() after the drain. */
const STOP_STEP_MS = 5_000;

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
