import type pg from 'pg';
import { AWA_VERSION } from '../model/descriptor.js';
import { AwaError } from '../model/errors.js';
import type { DescriptorReport, InstanceStore, QueueSetting, RuntimeSnapshot } from '../storage/index.js';
import type { ReceiptBook } from './receipt-book.js';

// This process's liveness in the database: one heartbeat row write per interval vouches for every receipt it
// holds and carries its snapshot (in-flight jobs, leadership); a slower tick reports the descriptors of the
// queues and kinds it serves. If the row is gone (cleaned up while the process was suspended), the heartbeat registers the
// instance again rather than let every later claim look orphaned. Receipts of this instance that the
// process does not know of (a claim whose answer was lost with its connection) are handed back: at once
// for the queue whose claim failed that way, and for every queue on a slow sweep, in case a lost claim
// committed after that.

export interface LivenessConfig {
  store: InstanceStore;
  instanceId: string;
  queues: readonly QueueSetting[];
  heartbeatIntervalMs: number;
  snapshotIntervalMs: number;
  /** The sweep runs this often and hands back unknown receipts older than this. */
  sweepMs: number;
}

export interface LivenessSources {
  snapshot(): RuntimeSnapshot;
  descriptors(): DescriptorReport[];
}

export class Liveness {
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private snapshotTimer: NodeJS.Timeout | null = null;
  private readonly suspect = new Set<string>();
  /** The write under way of each periodic kind: stop() waits for them, so none outlives it. */
  private readonly writing = new Map<'heartbeat' | 'sweep' | 'snapshot', Promise<void>>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly cfg: LivenessConfig,
    private readonly receipts: ReceiptBook,
    private readonly sources: LivenessSources,
    private readonly onError: (err: unknown) => void,
  ) {}

  async register(db: pg.ClientBase | pg.Pool = this.pool): Promise<void> {
    await this.cfg.store.registerInstance(db, this.cfg.instanceId, this.cfg.queues, AWA_VERSION);
    await this.cfg.store.reportDescriptors(db, this.cfg.instanceId, this.sources.descriptors());
  }

  start(): void {
    this.heartbeatTimer = setInterval(
      () => this.once('heartbeat', () => this.beat()),
      this.cfg.heartbeatIntervalMs,
    );
    this.sweepTimer = setInterval(() => this.once('sweep', () => this.sweep()), this.cfg.sweepMs);
    this.snapshotTimer = setInterval(() => {
      this.once('snapshot', () =>
        this.cfg.store
          .reportDescriptors(this.pool, this.cfg.instanceId, this.sources.descriptors())
          .catch((err: unknown) => this.onError(err)),
      );
    }, this.cfg.snapshotIntervalMs);
  }

  /** Stops the timers and waits for the writes they started (each catches its own failure). */
  async stop(): Promise<void> {
    for (const t of [this.heartbeatTimer, this.sweepTimer, this.snapshotTimer]) if (t) clearInterval(t);
    this.heartbeatTimer = this.sweepTimer = this.snapshotTimer = null;
    await Promise.all(this.writing.values());
  }

  /** Starts a periodic write unless the last one of its kind is still under way. Against a slow database
   * (a statement waiting on a lock, a server cancelling at queryTimeoutMs) they would otherwise overlap and
   * queue for the pool's connections, more of them every interval, ahead of the claims and flushes. */
  private once(kind: 'heartbeat' | 'sweep' | 'snapshot', write: () => Promise<void>): void {
    if (this.writing.has(kind)) return;
    this.writing.set(
      kind,
      write().finally(() => this.writing.delete(kind)),
    );
  }

  /** A claim of `queue` failed in a way that may have committed: reconcile before its next claim. */
  claimLost(queue: string): void {
    this.suspect.add(queue);
  }

  /** Called before each claim of `queue` (its dispatcher has no claim in flight). */
  async beforeClaim(queue: string): Promise<void> {
    if (!this.suspect.has(queue)) return;
    await this.handBack(queue, 0);
    this.suspect.delete(queue);
  }

  private async beat(): Promise<void> {
    try {
      if (await this.cfg.store.heartbeat(this.pool, this.cfg.instanceId, this.sources.snapshot())) return;
      await this.register();
      this.onError(
        new AwaError(
          'AWA_INSTANCE_REREGISTERED',
          `Instance ${this.cfg.instanceId} had no liveness row (was the process suspended longer than the cleanup window?); registered it again.`,
        ),
      );
    } catch (err) {
      this.onError(err);
    }
  }

  private async sweep(): Promise<void> {
    for (const q of this.cfg.queues) {
      await this.handBack(q.queue, this.cfg.sweepMs / 1000).catch((err: unknown) => this.onError(err));
    }
  }

  private async handBack(queue: string, olderThanSeconds: number): Promise<void> {
    const released = await this.cfg.store.releaseUnknownReceipts(this.pool, {
      instanceId: this.cfg.instanceId,
      queue,
      known: this.receipts.known(),
      olderThanSeconds,
    });
    if (released.length > 0) {
      this.onError(
        new AwaError(
          'AWA_CLAIM_LOST',
          `Handed back ${released.length} job(s) of queue "${queue}" whose claim answer was lost with its connection; they run again without spending an attempt.`,
        ),
      );
    }
  }
}
