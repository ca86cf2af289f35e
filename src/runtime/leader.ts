import { AwaError } from '../model/errors.js';
import {
  boundLockWaits,
  cleanupHistory,
  pruneAudit,
  expireCallbacks,
  needsNewConnection,
  nextCallbackTimeoutMs,
  promoteDue,
  pruneRing,
  releaseLeadership,
  rescueAbandoned,
  rotateRing,
  tallySlots,
  standForLeader,
  type PruneResult,
  type RescuedAttempt,
  type Schema,
} from '../storage/index.js';
import { CronEvaluator, type CronFire } from './cron.js';
import { openDedicated, type ConnectionSource, type Dedicated } from './dedicated.js';
import { settlesWithin } from './settles-within.js';
import type { MaintenanceStep, MaintenanceTelemetry, StepClock } from './telemetry/index.js';

// Maintenance leadership: every host may stand; the one holding the session advisory lock runs
// promotion, rescue, ring rotation/prune and history cleanup on its dedicated connection. Losing that connection loses the lock
// (the server drops it with the session), so leadership and the work it guards end together; the host
// then stands again after the election interval.

export interface LeaderConfig {
  schema: Schema;
  instanceId: string;
  electionIntervalMs: number;
  promoteIntervalMs: number;
  ringIntervalMs: number;
  ringSlotMinRows: number;
  ringSlotMaxAgeMs: number;
  completedRetentionMs: number;
  rescueIntervalMs: number;
  /** The longest the leader goes without looking for the next callback timeout (it wakes at one it knows). */
  callbackTimeoutIntervalMs: number;
  heartbeatStalenessMs: number;
  failedRetentionMs: number;
  dlqRetentionMs: number;
  /** Audit records older than this are deleted by the cleanup tick. */
  auditRetentionMs: number;
  ringCarryLimit: number;
  ringCarryAfterSlots: number;
  /** Cron evaluation tick; an occurrence not fired within cronMissedAfterMs of its time is missed. */
  cronIntervalMs: number;
  cronMissedAfterMs: number;
  /** How long stop() waits for a maintenance statement in flight before cutting the connection. */
  stopTimeoutMs: number;
}

export interface LeaderEvents {
  onLeadership(isLeader: boolean): void;
  onPrune(result: PruneResult): void;
  onRescue(rescued: RescuedAttempt[]): void;
  onCron?(fires: CronFire[]): void;
  onError(err: unknown): void;
}

/**
 * How long the lock holder's instance must have been silent before a standing host ends its session: twice the
 * staleness window that gets its attempts rescued, and at least 10 s. A host whose heartbeat is merely late (a
 * starved machine, a long pause) keeps leading; one that is frozen or cut off is replaced well before the
 * server's own TCP keepalive would notice (two hours by default).
 */
export function unseatAfterMs(heartbeatStalenessMs: number): number {
  return Math.max(2 * heartbeatStalenessMs, 10_000);
}

const PROMOTE_BATCH = 4096;
const PRUNE_LOCK_TIMEOUT_MS = 10;
// Maintenance never queues behind someone else's transaction: the SQL uses try-locks where it can, and this
// bounds any lock wait it could not avoid (a user's LOCK TABLE, a row an operator holds): the step fails,
// is reported, and runs again next tick.
const LEADER_LOCK_TIMEOUT_MS = 500;
const RESCUE_MAX_BATCHES = 256;
const CALLBACK_EXPIRY_BATCH = 1_000;
const CLEANUP_INTERVAL_MS = 60_000;
const CLEANUP_LIMIT = 5_000;

export class MaintenanceLeader {
  private conn: Dedicated | null = null;
  /** The backend of the leader session while this host leads (its instance row names it). */
  private backendPid: number | null = null;
  /** The silent instance this host was last refused the right to unseat (reported once). */
  private refusedFor: string | null = null;
  private stopped = true;
  private electionTimer: NodeJS.Timeout | null = null;
  private promoteTimer: NodeJS.Timeout | null = null;
  private ringTimer: NodeJS.Timeout | null = null;
  private rescueTimer: NodeJS.Timeout | null = null;
  private callbackTimer: NodeJS.Timeout | null = null;
  private cleanupTimer: NodeJS.Timeout | null = null;
  private cronTimer: NodeJS.Timeout | null = null;
  private readonly cron: CronEvaluator;
  private busy: Promise<unknown> = Promise.resolve();
  /** An election under way: stop() waits for it, so a connection it opens never outlives stop(). */
  private standing: Promise<void> = Promise.resolve();

  constructor(
    private readonly source: ConnectionSource,
    private readonly cfg: LeaderConfig,
    private readonly events: LeaderEvents,
    private readonly telemetry: MaintenanceTelemetry,
  ) {
    this.cron = new CronEvaluator(cfg.schema, cfg.cronMissedAfterMs, (err) => events.onError(err));
  }

  get isLeader(): boolean {
    return this.conn !== null;
  }

  /** The backend of this host's leader session while it leads, else null (reported by the heartbeat). */
  get leaderPid(): number | null {
    return this.conn ? this.backendPid : null;
  }

  start(): void {
    this.stopped = false;
    this.standNow();
  }

  /** Stops standing and releases leadership; returns within stopTimeoutMs whatever the database is doing
   * (a statement still running then is cut off with its connection, which also releases the lock). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.electionTimer) clearTimeout(this.electionTimer);
    this.clearTicks();
    await settlesWithin(this.standing, this.cfg.stopTimeoutMs);
    const conn = this.conn;
    this.conn = null;
    if (!conn) return;
    const idle = await settlesWithin(this.busy, this.cfg.stopTimeoutMs);
    if (
      idle &&
      (await settlesWithin(releaseLeadership(conn.client, this.cfg.schema), this.cfg.stopTimeoutMs))
    ) {
      await conn.close();
    } else {
      conn.destroy();
    }
    this.events.onLeadership(false);
  }

  /** Runs one promotion pass now (tests and `stop` use it); no-op unless leader. */
  promoteNow(): Promise<number> {
    return this.serial(() => this.promote());
  }

  private standNow(): void {
    this.standing = this.stand();
  }

  private async stand(): Promise<void> {
    if (this.stopped || this.conn) return;
    let conn: Dedicated | null = null;
    try {
      conn = await openDedicated(this.source, 'awa-leader', (err) => this.lost(err));
      await boundLockWaits(conn.client, LEADER_LOCK_TIMEOUT_MS);
      const standing = await standForLeader(
        conn.client,
        this.cfg.schema,
        this.cfg.instanceId,
        Math.ceil(unseatAfterMs(this.cfg.heartbeatStalenessMs) / 1000),
      );
      // Lost before it was ours (lost() ignored it): leading on it would hold no lock and never stand again.
      if (conn.lost) throw conn.lost;
      // stop() may have come while the lock was being taken: then closing the session gives it up.
      if (standing.outcome === 'leader' && !this.stopped) {
        this.conn = conn;
        this.backendPid = standing.backendPid;
        this.events.onLeadership(true);
        this.scheduleTicks();
        return;
      }
      await conn.close();
      if (standing.outcome === 'unseated' || standing.outcome === 'refused') this.reportUnseat(standing);
    } catch (err) {
      await conn?.close();
      this.events.onError(err);
    }
    this.scheduleElection();
  }

  /** A silent instance held the lock: say what was done about it (an operator will want to know either way;
   * a refusal once per silent instance, not at every election). */
  private reportUnseat(standing: { outcome: 'unseated' | 'refused'; instance: string }): void {
    if (standing.outcome === 'refused' && this.refusedFor === standing.instance) return;
    this.refusedFor = standing.outcome === 'refused' ? standing.instance : null;
    if (standing.outcome === 'unseated' && standing.instance === this.cfg.instanceId) {
      this.events.onError(
        new AwaError(
          'AWA_LEADER_UNSEATED',
          'This host ended a leader session of its own that it had lost (its connection dropped while the server kept the session); the next election takes the lock.',
        ),
      );
      return;
    }
    const silent = `instance ${standing.instance}, silent for more than ${unseatAfterMs(this.cfg.heartbeatStalenessMs)} ms`;
    this.events.onError(
      standing.outcome === 'unseated'
        ? new AwaError(
            'AWA_LEADER_UNSEATED',
            `This host ended the leader session of ${silent} (frozen or cut off with its connection still open): its lock is released and the next election takes it.`,
          )
        : new AwaError(
            'AWA_LEADER_UNSEATED',
            `The leader lock is held by ${silent}, and this database role may not end that session: grant it pg_signal_backend, or terminate the session (pg_stat_activity, application_name awa-leader); until then nothing is promoted, rescued or pruned.`,
          ),
    );
  }

  private lost(err: Error): void {
    if (!this.conn) return;
    this.conn = null;
    this.clearTicks();
    this.events.onLeadership(false);
    if (this.stopped) return;
    this.events.onError(err);
    this.scheduleElection();
  }

  private scheduleElection(): void {
    if (this.stopped) return;
    this.electionTimer = setTimeout(() => this.standNow(), this.cfg.electionIntervalMs);
  }

  private scheduleTicks(): void {
    // A task may answer how soon it wants to run again (sooner than its interval, never later).
    const loop = (interval: number, task: () => Promise<unknown>, set: (t: NodeJS.Timeout) => void) => {
      const tick = () => {
        if (!this.conn) return;
        let next = interval;
        // serial() has already reported a failure (lost connection, server restart); the tick only
        // reschedules, and must not turn that rejection into an unhandled one that ends the process.
        this.serial(task)
          .then((soon) => {
            if (typeof soon === 'number') next = Math.min(interval, soon);
          })
          .catch(() => {})
          .finally(() => {
            if (this.conn) set(setTimeout(tick, next));
          });
      };
      set(setTimeout(tick, 0));
    };
    loop(
      this.cfg.promoteIntervalMs,
      () => this.promote(),
      (t) => (this.promoteTimer = t),
    );
    loop(
      this.cfg.ringIntervalMs,
      () => this.maintainRing(),
      (t) => (this.ringTimer = t),
    );
    loop(
      this.cfg.rescueIntervalMs,
      () => this.rescue(),
      (t) => (this.rescueTimer = t),
    );
    loop(
      this.cfg.callbackTimeoutIntervalMs,
      () => this.expireCallbacks(),
      (t) => (this.callbackTimer = t),
    );
    loop(
      CLEANUP_INTERVAL_MS,
      () => this.cleanup(),
      (t) => (this.cleanupTimer = t),
    );
    loop(
      this.cfg.cronIntervalMs,
      () => this.evaluateCron(),
      (t) => (this.cronTimer = t),
    );
  }

  private clearTicks(): void {
    const timers = [this.promoteTimer, this.ringTimer, this.rescueTimer, this.callbackTimer];
    for (const t of [...timers, this.cleanupTimer, this.cronTimer]) if (t) clearTimeout(t);
    this.promoteTimer = this.ringTimer = this.rescueTimer = this.callbackTimer = null;
    this.cleanupTimer = this.cronTimer = null;
  }

  /** One statement at a time on the leader connection. */
  private serial<T>(task: () => Promise<T>): Promise<T> {
    const next = this.busy.then(task, task);
    this.busy = next.catch((err) => {
      // Unanswered (mid-statement, maybe dead) or read-only (on a server that cannot take writes): lost()
      // reports it and stands again, on a new connection.
      if (needsNewConnection(err) && this.conn) return this.conn.drop(err);
      this.events.onError(err);
    });
    return next;
  }

  private async promote(): Promise<number> {
    const clock = this.telemetry.start();
    let total = 0;
    // A bounded number of full batches per tick keeps one tick from monopolising the connection.
    await this.measured('promote', clock, async () => {
      for (let i = 0; i < 8 && this.conn; i++) {
        const n = await promoteDue(this.conn.client, this.cfg.schema, PROMOTE_BATCH);
        total += n;
        if (n < PROMOTE_BATCH) break;
      }
    });
    this.telemetry.promoted(clock, total);
    return total;
  }

  /** Abandoned attempts: a silent worker's, or past their deadline. */
  private async rescue(): Promise<void> {
    if (!this.conn) return;
    const clock = this.telemetry.start();
    const rescued = await this.measured('rescue', clock, () =>
      rescueAbandoned(this.conn!.client, this.cfg.schema, {
        stalenessSeconds: this.cfg.heartbeatStalenessMs / 1000,
        maxBatches: RESCUE_MAX_BATCHES,
      }),
    );
    if (rescued.length > 0) this.events.onRescue(rescued);
    this.telemetry.rescued(clock, rescued, []);
  }

  /** Parked jobs whose callback timed out; answers how long until the next one is due, so the leader wakes at
   * that deadline rather than on its next look (null: none is parked with a timeout). */
  private async expireCallbacks(): Promise<number | null> {
    if (!this.conn) return null;
    const clock = this.telemetry.start();
    const expired = await this.measured('rescue', clock, () =>
      expireCallbacks(this.conn!.client, this.cfg.schema, CALLBACK_EXPIRY_BATCH),
    );
    this.telemetry.rescued(clock, [], expired);
    if (expired.length === CALLBACK_EXPIRY_BATCH) return 0;
    if (!this.conn) return null;
    const ms = await nextCallbackTimeoutMs(this.conn.client, this.cfg.schema);
    // One millisecond past the deadline: expiry takes jobs whose timeout is strictly before now().
    return ms === null ? null : ms + 1;
  }

  private async cleanup(): Promise<void> {
    if (!this.conn) return;
    const clock = this.telemetry.start();
    const result = await this.measured('cleanup', clock, () =>
      cleanupHistory(this.conn!.client, this.cfg.schema, {
        failedRetentionSeconds: this.cfg.failedRetentionMs / 1000,
        dlqRetentionSeconds: this.cfg.dlqRetentionMs / 1000,
        completedRetentionSeconds: this.cfg.completedRetentionMs / 1000,
        limit: CLEANUP_LIMIT,
      }),
    );
    this.telemetry.cleanedUp(clock, result);
    if (!this.conn) return;
    await this.measured('cleanup', this.telemetry.start(), () =>
      pruneAudit(this.conn!.client, this.cfg.schema, this.cfg.auditRetentionMs / 1000, CLEANUP_LIMIT),
    );
  }

  /** Fires the due occurrences of cron schedules (one transaction each, on this connection). */
  private async evaluateCron(): Promise<void> {
    if (!this.conn) return;
    const clock = this.telemetry.start();
    const fires = await this.measured('cron', clock, () => this.cron.tick(this.conn!.client));
    this.telemetry.cronEvaluated(clock, fires.filter((f) => f.outcome === 'fired').length);
    if (fires.length > 0) this.events.onCron?.(fires);
  }

  private async maintainRing(): Promise<void> {
    if (!this.conn) return;
    const rotateClock = this.telemetry.start();
    const slot = await this.measured('rotate', rotateClock, () =>
      rotateRing(this.conn!.client, this.cfg.schema, {
        minRows: this.cfg.ringSlotMinRows,
        maxAgeMs: this.cfg.ringSlotMaxAgeMs,
      }),
    );
    this.telemetry.rotated(rotateClock, slot);
    if (!this.conn) return;
    const pruneClock = this.telemetry.start();
    const result = await this.measured('prune', pruneClock, () =>
      pruneRing(this.conn!.client, this.cfg.schema, {
        lockTimeoutMs: PRUNE_LOCK_TIMEOUT_MS,
        carryLimit: this.cfg.ringCarryLimit,
        carryAfterSlots: this.cfg.ringCarryAfterSlots,
      }),
    );
    this.telemetry.pruned(pruneClock, result);
    this.events.onPrune(result);
    if (!this.conn) return;
    const tallyClock = this.telemetry.start();
    const tallied = await this.measured('tally', tallyClock, () =>
      tallySlots(this.conn!.client, this.cfg.schema, PRUNE_LOCK_TIMEOUT_MS),
    );
    this.telemetry.tallied(tallyClock, tallied);
  }

  /** Runs one step, recording its failure (the caller's serial() reports the error itself). */
  private async measured<T>(step: MaintenanceStep, clock: StepClock, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      this.telemetry.failed(step, clock, err);
      throw err;
    }
  }
}
