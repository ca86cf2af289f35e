import type pg from 'pg';
import { AwaError, EventLoopBlockedError } from '../model/errors.js';
import type { AnyHandlerEntry } from '../model/handler.js';
import type { JobHandler } from '../model/job.js';
import type { JobKind } from '../model/job-kind.js';
import { settlesWithin } from '../model/settles-within.js';
import {
  assertMigrated,
  createPool,
  listenFromBirth,
  redact,
  ringStorage,
  withClient,
  wrapDatabaseError,
  type ConnectionSource,
  type Storage,
} from '../storage/index.js';
import {
  ConsumerTelemetry,
  HostGauges,
  MaintenanceTelemetry,
  telemetryScope,
  type HostSettlement,
  type TelemetryScope,
} from '../telemetry/index.js';
import { Elector } from '../maintenance/elector.js';
import { maintenanceServices } from '../maintenance/services.js';
import type { PoolExecutor } from '../threads/pool-executor.js';
import { AttemptRunner } from './attempt-runner.js';
import { AttemptTracker } from './attempts.js';
import { CallbackWaits } from './callback-waits.js';
import { Claimer } from './claimer.js';
import type { SettleBatcher } from './settle-batcher.js';
import { resolveHostConfig, resultRetentionByQueue, type HostConfig, type WorkerOptions } from './config.js';
import { syncCronDefinitions } from './cron-sync.js';
import { hostDescriptors } from './descriptors.js';
import { Dispatcher } from './dispatcher.js';
import { HostEmitter } from './events.js';
import type { ContextDeps } from './job-context.js';
import type { FlowDeps } from './job-flow.js';
import { Liveness } from './liveness.js';
import { LoopWatch } from './loop-watch.js';
import { ProgressWriter } from './progress-writer.js';
import { StepRecorder } from './step-recorder.js';
import { ReceiptBook } from './receipt-book.js';
import { HandlerRegistry } from './registry.js';
import { settleBatcher, settlementOf } from './settlements.js';
import { HostStats } from './stats.js';
import { startThreadPoolKinds } from './thread-pool-kinds.js';
import { callbackPollMs, pollingFallbackWarning, PollingWakeup, sessionSource } from './sessions.js';
import { Wakeup, type WakeupChannel } from './wakeup.js';

// The worker host wires one process's parts and runs their lifecycle (start, graceful stop): a dispatcher per
// queue (when to claim), the claimer, the attempt runner (one job from permit to settlement, handlers inline or
// in the worker-thread pool), the settle batcher, the LISTEN wake-up, the liveness heartbeat and, when it
// may lead, the maintenance elector. It owns every database conversation of the process.

type State = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

export class WorkerHost extends HostEmitter {
  readonly config: HostConfig;
  readonly stats = new HostStats();
  private readonly registry = new HandlerRegistry();
  private readonly pool: pg.Pool;
  /** Every storage operation this process performs, bound to its schema once. */
  private readonly store: Storage;
  private readonly ownsPool: boolean;
  private readonly dispatchers = new Map<string, Dispatcher>();
  private readonly batcher: SettleBatcher<HostSettlement>;
  private readonly attempts = new AttemptTracker();
  private readonly progress: ProgressWriter;
  private readonly steps: StepRecorder;
  private readonly receipts = new ReceiptBook();
  private readonly callbackWaits: CallbackWaits;
  private readonly contextDeps: ContextDeps;
  private readonly liveness: Liveness;
  private readonly leader: Elector | null;
  private readonly wakeup: WakeupChannel;
  /** Where LISTEN and the leader lock get their sessions; null when the host has none (sessions.ts). */
  private readonly sessions: ConnectionSource | null;
  private state: State = 'new';
  private starting: Promise<void> | null = null;
  private stopping: Promise<void> | null = null;
  private executor: PoolExecutor | null = null;
  private readonly scope: TelemetryScope = telemetryScope();
  private readonly telemetry: ConsumerTelemetry;
  private gauges: HostGauges | null = null;
  /** Reports a stall of the event loop as long as two heartbeat intervals (at least 1 s). */
  private readonly loopWatch: LoopWatch;
  private readonly claimer: Claimer;
  private readonly runner: AttemptRunner;

  constructor(options: WorkerOptions) {
    super();
    this.config = resolveHostConfig(options);
    const c = this.config;
    this.loopWatch = new LoopWatch(Math.max(1_000, 2 * c.heartbeatIntervalMs), (stalledMs) =>
      this.reportError(
        new EventLoopBlockedError(stalledMs, c.heartbeatStalenessMs, this.registry.inlineKinds()),
      ),
    );
    this.store = ringStorage(c.schema, { pooler: c.pooler });
    this.ownsPool = !c.pool;
    this.pool =
      c.pool ??
      createPool(c.connectionString!, c.poolSize, 'awa-worker', c.queryTimeoutMs, c.pooler === 'none');
    if (c.pool) listenFromBirth(c.pool);
    this.sessions = sessionSource(c, this.pool);
    this.telemetry = new ConsumerTelemetry(
      this.scope,
      new Set([...c.queues].filter(([, q]) => q.dlq).map(([queue]) => queue)),
    );
    this.batcher = settleBatcher(
      {
        pool: this.pool,
        store: this.store.settler,
        telemetry: this.telemetry,
        onFlushed: (items, accepted) => this.onFlushed(items, accepted),
        onError: (err) => this.reportError(err),
      },
      c.settleBatchSize,
      c.settleFlushMs,
    );
    for (const [queue, q] of c.queues) {
      this.dispatchers.set(
        queue,
        new Dispatcher(queue, q.concurrency, c.claimBatchSize, c.pollIntervalMs, q.prefetch, {
          claim: (name, max) => this.claimer.claim(name, max),
          execute: (name, batch, job) => this.runner.start(name, batch, job),
          handBack: (name, batch, job) => this.runner.handBack(name, batch, job),
          backpressure: () => this.batcher.backlog > c.settleBatchSize * 8,
          onError: (err) => this.reportError(err),
        }),
      );
    }
    this.progress = new ProgressWriter(
      (w) => this.store.settler.setProgress(this.pool, w),
      (err) => this.reportError(err),
    );
    this.steps = new StepRecorder((items) => this.store.settler.recordSteps(this.pool, items));
    this.callbackWaits = new CallbackWaits(
      (jobId, runLease) => this.store.settler.callbackResult(this.pool, jobId, runLease),
      (err) => this.reportError(err),
      () => this.telemetry.waitTimedOut(),
    );
    this.contextDeps = {
      reportProgress: (w) => this.progress.report(w),
      registerCallback: (a, timeoutMs) => this.store.settler.registerCallback(this.pool, a, timeoutMs),
      callbackRegistered: (attempt) => this.telemetry.registeredCallback(attempt.queue, attempt.job.kind),
      waitForCallback: (jobId, runLease, timeoutMs, signal) =>
        this.callbackWaits.wait(jobId, runLease, timeoutMs, signal),
      recordedSteps: (jobId) => this.store.settler.recordedSteps(this.pool, jobId),
      recordStep: (a, w) => this.steps.record(a, w),
      park: (attempt, wakeAt) => this.runner.park(attempt, wakeAt),
      ...this.flowDeps(),
    };
    this.liveness = this.newLiveness();
    this.wakeup = this.sessions
      ? this.newWakeup(this.sessions)
      : new PollingWakeup(callbackPollMs(c.pollIntervalMs), () => this.callbackWaits.recheckAll());
    this.claimer = this.newClaimer();
    this.runner = this.newRunner();
    this.leader = c.maintenance && this.sessions ? this.newElector(this.sessions) : null;
  }

  /** The heartbeat and re-registration of this instance, and the hand-back of receipts it lost track of. */
  private newLiveness(): Liveness {
    const c = this.config;
    return new Liveness(
      this.pool,
      {
        store: this.store.instances,
        instanceId: c.instanceId,
        queues: [...c.queues].map(([queue, q]) => ({
          queue,
          dlq: q.dlq,
          concurrency: q.concurrency,
          limits: q.limits,
        })),
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
  }

  /** The LISTEN connection: new jobs wake their dispatcher, cancels reach the runner, callbacks their waits. */
  private newWakeup(source: ConnectionSource): Wakeup {
    return new Wakeup(
      source,
      this.store.claimer,
      {
        onQueue: (queue) => this.dispatchers.get(queue)?.notified(),
        onCancel: (jobId, runLease) => this.runner.closedElsewhere(jobId, runLease),
        onCallback: (jobId, runLease) => this.callbackWaits.notified(jobId, runLease),
      },
      () => {
        this.wakeAll();
        this.callbackWaits.recheckAll();
      },
      (err) => this.reportError(err),
    );
  }

  private newClaimer(): Claimer {
    const c = this.config;
    return new Claimer(
      this.pool,
      {
        store: this.store.claimer,
        instanceId: c.instanceId,
        priorityAgingSeconds: c.priorityAgingSeconds,
        deadlineSeconds: (queue) => Math.ceil(c.queues.get(queue)!.deadlineMs / 1000),
      },
      {
        liveness: this.liveness,
        wakeup: this.wakeup,
        receipts: this.receipts,
        stats: this.stats,
        telemetry: this.telemetry,
      },
    );
  }

  /** What ctx.transaction(), ctx.dependencies(), ctx.spawn() and ctx.waitForChildren() reach (job-flow.ts). */
  private flowDeps(): FlowDeps {
    const settler = this.store.settler;
    return {
      pool: this.pool,
      completeOn: async (tx, attempt, resultJson) => {
        const { queue, batch, job } = attempt;
        const s = settlementOf(queue, batch, job, 'completed', undefined, undefined, resultJson);
        return (await settler.settleAttempts(tx, [s])).has(job.id);
      },
      completedInTransaction: (attempt) => this.runner.completedInTransaction(attempt),
      dependenciesOf: (jobId) => settler.dependenciesOf(this.pool, jobId),
      prepareLanes: (rows) =>
        this.store.producer.ensureLanes(this.pool, [...new Set(rows.map((r) => r.queue))], false),
      spawnChildren: (a, spawn) => settler.spawnChildren(this.pool, a, spawn),
      block: (attempt) => this.runner.block(attempt),
    };
  }

  private newRunner(): AttemptRunner {
    const c = this.config;
    return new AttemptRunner({
      instanceId: c.instanceId,
      unknownKindDelayMs: c.unknownKindDelayMs,
      registry: this.registry,
      attempts: this.attempts,
      receipts: this.receipts,
      stats: this.stats,
      telemetry: this.telemetry,
      context: this.contextDeps,
      claimSpan: (batch) => this.claimer.spanOf(batch),
      queueSettlement: (result) => this.batcher.add(result),
      release: (queue) => this.dispatchers.get(queue)!.release(),
      forgetHeld: (jobId, runLease) => this.forgetHeld(jobId, runLease),
      reportError: (err) => this.reportError(err),
    });
  }

  /** Stands for maintenance leadership; while elected, runs every maintenance service. */
  private newElector(source: ConnectionSource): Elector {
    const c = this.config;
    const services = maintenanceServices(
      this.store.maintenance,
      {
        promoteIntervalMs: c.promoteIntervalMs,
        ring: {
          intervalMs: c.ringIntervalMs,
          slotMinRows: c.ringSlotMinRows,
          slotMaxAgeMs: c.ringSlotMaxAgeMs,
          carryLimit: c.ringCarryLimit,
          carryAfterSlots: c.ringCarryAfterSlots,
        },
        rescueIntervalMs: c.rescueIntervalMs,
        heartbeatStalenessMs: c.heartbeatStalenessMs,
        callbackTimeoutIntervalMs: c.callbackTimeoutIntervalMs,
        completedRetentionMs: c.completedRetentionMs,
        failedRetentionMs: c.failedRetentionMs,
        dlqRetentionMs: c.dlqRetentionMs,
        auditRetentionMs: c.auditRetentionMs,
        resultRetentionByQueue: resultRetentionByQueue(c),
        cronIntervalMs: c.cronIntervalMs,
        cronMissedAfterMs: c.cronMissedAfterMs,
      },
      {
        onPrune: (result) => this.notify('prune', result),
        onRescue: (rescued) => this.notify('rescue', rescued),
        onCron: (fires) => this.notify('cron', fires),
        onError: (err) => this.reportError(err),
      },
      new MaintenanceTelemetry(this.scope),
    );
    return new Elector(
      source,
      this.store.maintenance,
      {
        instanceId: c.instanceId,
        electionIntervalMs: c.leaderElectionIntervalMs,
        heartbeatStalenessMs: c.heartbeatStalenessMs,
        stopTimeoutMs: STOP_STEP_MS,
      },
      {
        onLeadership: (isLeader) => this.notify('leadership', isLeader),
        onError: (err) => this.reportError(err),
      },
      services,
    );
  }

  /** Registers the handler for a kind. Call before start(). */
  register<Args, Result = unknown>(kind: JobKind<Args, Result>, handle: JobHandler<Args, Result>): this {
    this.registry.add(kind, handle);
    return this;
  }

  /** Registers each entry's handler (defineHandler(...) results, of any kinds). Call before start(). */
  registerAll(entries: readonly AnyHandlerEntry[]): this {
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
          await this.store.producer.ensureLanes(client, [...this.config.queues.keys()]);
          await this.liveness.register(client);
          const c = this.config;
          await syncCronDefinitions(client, this.store, c.instanceId, c.cron, c.heartbeatStalenessMs);
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
    if (!this.sessions) this.reportWarning(pollingFallbackWarning(this.config));
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
    await settlesWithin(this.steps.drain(), STOP_STEP_MS);
    await settlesWithin(this.liveness.stop(), STOP_STEP_MS);
    // Receipts still open now belong to handlers that did not finish: mark this instance stopped so
    // the leader rescues them at once instead of waiting out the staleness window.
    await settlesWithin(
      this.store.instances
        .markStopped(this.pool, this.config.instanceId)
        .catch((err: unknown) => this.reportError(err)),
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
            held: this.dispatchers.get(queue)!.held,
          }));
        },
        backlog: () => this.batcher.backlog,
        isLeader: () => this.isLeader,
        queueHealth: () => this.store.reads.queueHealth(this.pool, 60),
      },
      (err) => this.reportError(err),
    );
  }

  /** Drops a job some dispatcher holds for a permit (its attempt was closed elsewhere before it started). */
  private forgetHeld(jobId: string, runLease: number) {
    for (const d of this.dispatchers.values()) {
      const held = d.forget(jobId, runLease);
      if (held) return { ...held, queue: d.queue };
    }
    return null;
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
