import type pg from 'pg';
import {
  needsNewConnection,
  openDedicated,
  pingSession,
  type ClaimerStore,
  type ConnectionSource,
  type Dedicated,
  type Notifications,
} from '../storage/index.js';

// Keeps one LISTEN connection alive (new-jobs and cancel notifications): on loss it reconnects with exponential backoff (100 ms → 5 s), and
// after every (re)connect asks for a poll of every queue, because notifications sent while it was down
// are gone for good. Between notifications it lends the connection for one statement at a time (lend()).
// A LISTEN session that sits idle says nothing when it dies silently (a failover that left the old address
// black-holed): TCP keepalive finds that out after minutes, or never behind something that still answers
// for the peer, and the host would lose every wake-up meanwhile. So with a query timeout, a session idle
// that long is asked one round trip, and one that does not answer is given up like any unanswered statement.

/** The wake-up connection lent for one statement; release() as soon as the statement has ended, with its
 * error if it failed. */
export interface LentConnection {
  client: pg.ClientBase;
  release(err?: unknown): void;
}

/** The wake-up side as the claimer and the host use it: LISTEN on a session of its own (Wakeup), or polling
 * alone (PollingWakeup). */
export interface WakeupChannel {
  lend(): LentConnection | null;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export class Wakeup implements WakeupChannel {
  private conn: Dedicated | null = null;
  private stopped = false;
  private delayMs = 0;
  private timer: NodeJS.Timeout | null = null;
  private lent = false;
  /** When the connection last finished a statement, or was opened. */
  private usedAt = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  /** An idle check under way: stop() waits for it. */
  private checking: Promise<void> | null = null;
  /** A (re)connect under way: stop() waits for it, so the connection it opens is closed before stop returns. */
  private connecting: Promise<void> | null = null;

  constructor(
    private readonly source: ConnectionSource,
    private readonly store: ClaimerStore,
    private readonly on: Notifications,
    private readonly onConnected: () => void,
    private readonly onError: (err: unknown) => void,
  ) {}

  /**
   * The wake-up connection for one statement, or null while it is down or already lent (use the pool then).
   * A claim that a notification prompted runs soonest here: this session's backend has just sent that
   * notification and is running, where a pooled session's backend must first be woken and scheduled (about
   * 0.2 ms of an idle pickup on two cores; docs/benchmarking.md). Notifications that come meanwhile are
   * delivered when the statement ends. A loss mid-statement fails the statement and reconnects like any loss.
   */
  lend(): LentConnection | null {
    if (!this.conn || this.lent) return null;
    this.lent = true;
    const conn = this.conn;
    return {
      client: conn.client,
      release: (err?: unknown) => {
        this.lent = false;
        this.usedAt = Date.now();
        // Unanswered (mid-statement, maybe dead) or read-only (still on a server that cannot take writes, and
        // deaf to the producers of the one that can): lost() reconnects.
        if (needsNewConnection(err)) conn.drop(err);
      },
    };
  }

  async start(): Promise<void> {
    await this.connect();
    const idleMs = this.source.queryTimeoutMs;
    if (idleMs !== undefined) this.idleTimer = setInterval(() => this.checkIdle(idleMs), idleMs);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.idleTimer) clearInterval(this.idleTimer);
    await this.checking;
    await this.connecting?.catch(() => {});
    await this.conn?.close();
    this.conn = null;
  }

  private connect(): Promise<void> {
    const attempt = this.open().finally(() => {
      if (this.connecting === attempt) this.connecting = null;
    });
    this.connecting = attempt;
    return attempt;
  }

  private async open(): Promise<void> {
    const conn = await openDedicated(this.source, 'awa-listen', (err) => this.lost(err));
    try {
      await this.store.listen(conn.client, this.on);
      // Lost before it was ours (lost() ignored it): keeping it would leave the host deaf for good.
      if (conn.lost) throw conn.lost;
    } catch (err) {
      await conn.close();
      throw err;
    }
    if (this.stopped) return conn.close();
    this.conn = conn;
    this.usedAt = Date.now();
    this.delayMs = 0;
    this.onConnected();
  }

  /** Asks the connection one round trip when it has run nothing for `idleMs` (lend() and its release do the
   * rest: an unanswered check drops it, and lost() reconnects). */
  private checkIdle(idleMs: number): void {
    if (this.checking || Date.now() - this.usedAt < idleMs) return;
    const lent = this.lend();
    if (!lent) return;
    this.checking = pingSession(lent.client).then(
      () => lent.release(),
      (err: unknown) => lent.release(err),
    );
    void this.checking.finally(() => (this.checking = null));
  }

  /** Only the established connection's loss counts. One lost while connecting also fails connect(), which
   * schedules the reconnect: answering both would leave the host with two LISTEN connections once the
   * server is back. (The leader's connection follows the same rule.) */
  private lost(err: Error): void {
    if (!this.conn) return;
    this.conn = null;
    if (this.stopped) return;
    this.onError(err);
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    this.delayMs = Math.min(Math.max(this.delayMs * 2, 100), 5_000);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.connect().catch((err) => {
        if (this.stopped) return;
        this.onError(err);
        this.scheduleReconnect();
      });
    }, this.delayMs);
    this.timer.unref();
  }
}
