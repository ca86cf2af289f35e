import { AwaError } from '../model/errors.js';
import { settlesWithin } from '../model/settles-within.js';
import {
  boundLockWaits,
  needsNewConnection,
  openDedicated,
  type ConnectionSource,
  type Dedicated,
  type MaintenanceStore,
} from '../storage/index.js';
import type { MaintenanceService } from './service.js';

// The elector: every host may stand; the one holding the session advisory lock runs the maintenance services
// (services.ts) on its dedicated connection, each on its own tick, one statement at a time. Losing that
// connection loses the lock (the server drops it with the session), so leadership and the work it guards end
// together; the host then stands again after the election interval.

export interface ElectorConfig {
  instanceId: string;
  electionIntervalMs: number;
  heartbeatStalenessMs: number;
  /** How long stop() waits for a maintenance statement in flight before cutting the connection. */
  stopTimeoutMs: number;
}

export interface ElectorEvents {
  onLeadership(isLeader: boolean): void;
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

// Maintenance never queues behind someone else's transaction: the SQL uses try-locks where it can, and this
// bounds any lock wait it could not avoid (a user's LOCK TABLE, a row an operator holds): the step fails,
// is reported, and runs again next tick.
const LEADER_LOCK_TIMEOUT_MS = 500;

export class Elector {
  private conn: Dedicated | null = null;
  /** The backend of the leader session while this host leads (its instance row names it). */
  private backendPid: number | null = null;
  /** The silent instance this host was last refused the right to unseat (reported once). */
  private refusedFor: string | null = null;
  private stopped = true;
  private electionTimer: NodeJS.Timeout | null = null;
  /** Each service's next tick while this host leads. */
  private readonly ticks = new Map<MaintenanceService, NodeJS.Timeout>();
  private busy: Promise<unknown> = Promise.resolve();
  /** An election under way: stop() waits for it, so a connection it opens never outlives stop(). */
  private standing: Promise<void> = Promise.resolve();

  constructor(
    private readonly source: ConnectionSource,
    private readonly store: MaintenanceStore,
    private readonly cfg: ElectorConfig,
    private readonly events: ElectorEvents,
    private readonly services: readonly MaintenanceService[],
  ) {}

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
    if (idle && (await settlesWithin(this.store.releaseLeadership(conn.client), this.cfg.stopTimeoutMs))) {
      await conn.close();
    } else {
      conn.destroy();
    }
    this.events.onLeadership(false);
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
      const standing = await this.store.standForLeader(
        conn.client,
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
    for (const service of this.services) {
      const tick = () => {
        if (!this.conn) return;
        let next = service.intervalMs;
        // serial() has already reported a failure (lost connection, server restart); the tick only
        // reschedules, and must not turn that rejection into an unhandled one that ends the process.
        this.serial(() => this.runService(service))
          .then((soon) => {
            if (typeof soon === 'number') next = Math.min(service.intervalMs, soon);
          })
          .catch(() => {})
          .finally(() => {
            if (this.conn) this.ticks.set(service, setTimeout(tick, next));
          });
      };
      this.ticks.set(service, setTimeout(tick, 0));
    }
  }

  /** One pass of a service on the connection that leads when its turn comes (none: leadership was lost
   * while it waited); it stops between statements once that connection no longer leads. */
  private async runService(service: MaintenanceService): Promise<number | null | void> {
    const conn = this.conn;
    if (!conn) return;
    return service.run(conn.client, () => this.conn === conn);
  }

  private clearTicks(): void {
    for (const t of this.ticks.values()) clearTimeout(t);
    this.ticks.clear();
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
}
