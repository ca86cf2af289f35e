import type { Settlement } from '../storage/index.js';

// Group commit for attempt results: settlements queue here and are flushed as one settle_attempts() call when
// `batchSize` are waiting or `flushMs` has passed, with one flush in flight at a time (results that
// arrive meanwhile form the next batch). A flush that fails for a passing reason (lost connection) is
// retried with backoff: the fencing token makes a replay harmless, and a settlement is only dropped once
// the database has answered for it. A flush the database refuses for its DATA is not retried as it is: the
// batch is split in halves until the one bad settlement is alone, the good ones commit, and the bad one is
// replaced by a failure that names the cause (or, if even that is refused, dropped: its receipt stays open
// and the attempt is rescued like a crash would leave it).

/** T: the settlement as the caller queues it (the host adds what its metrics are labelled by). */
export interface BatcherDeps<T extends Settlement = Settlement> {
  flush(items: readonly T[]): Promise<Set<string>>;
  /** Reports each flush: what was accepted and what the fence rejected as stale. */
  onFlushed(items: readonly T[], accepted: Set<string>): void;
  onError(err: unknown): void;
  /** True when the database refused the flush because of what one of its settlements holds. Without it,
   * every failed flush is retried whole. */
  isPoison?(err: unknown): boolean;
  /** The failure to record instead of a settlement the database refused (default: the same settlement
   * again, which is then dropped if refused once more). */
  quarantine?(item: T, err: unknown): T;
}

export class SettleBatcher<T extends Settlement = Settlement> {
  private pending: T[] = [];
  private inFlight: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private retryDelayMs = 0;
  private idleWaiters: (() => void)[] = [];
  private closed = false;

  constructor(
    private readonly deps: BatcherDeps<T>,
    private readonly batchSize: number,
    private readonly flushMs: number,
  ) {}

  /** Settlements accepted but not yet durable. */
  get backlog(): number {
    return this.pending.length;
  }

  /** Ignored once closed: that attempt's receipt stays open and is rescued, like a crash would leave it. */
  add(item: T): void {
    if (this.closed) return;
    this.pending.push(item);
    if (this.inFlight) return;
    if (this.pending.length >= this.batchSize) this.startFlush();
    else this.timer ??= setTimeout(() => this.startFlush(), this.flushMs);
  }

  /** Resolves when everything added so far has been flushed (used by stop()). */
  drain(): Promise<void> {
    if (!this.inFlight && this.pending.length === 0) return Promise.resolve();
    if (!this.inFlight) this.startFlush();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** After the final drain: later results are dropped and a failing flush is no longer retried. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private startFlush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.inFlight || this.pending.length === 0) return;
    const items =
      this.pending.length <= this.batchSize ? this.pending : this.pending.slice(0, this.batchSize);
    this.pending = items === this.pending ? [] : this.pending.slice(items.length);
    this.inFlight = this.runFlush(items);
  }

  private async runFlush(items: T[]): Promise<void> {
    const rest = await this.flushOrIsolate(items);
    if (rest.length === 0) this.retryDelayMs = 0;
    else if (this.closed) {
      this.pending = [];
      this.inFlight = null;
      return this.notifyIdle();
    } else {
      this.pending = rest.concat(this.pending);
      this.retryDelayMs = Math.min(Math.max(this.retryDelayMs * 2, 50), 5_000);
      await new Promise((r) => setTimeout(r, this.retryDelayMs));
    }
    this.inFlight = null;
    // Someone waiting in drain() or a retry in progress: flush the rest now rather than after the delay.
    const urgent = this.retryDelayMs > 0 || this.idleWaiters.length > 0;
    if (this.pending.length >= this.batchSize || (this.pending.length > 0 && urgent)) this.startFlush();
    else if (this.pending.length > 0) this.timer ??= setTimeout(() => this.startFlush(), this.flushMs);
    else this.notifyIdle();
  }

  /**
   * One flush; when the database refuses it for its data, bisect down to the culprit. Never throws: returns
   * the settlements still to be retried (the database did not answer for them), in order.
   */
  private async flushOrIsolate(items: T[]): Promise<T[]> {
    try {
      this.deps.onFlushed(items, await this.deps.flush(items));
      return [];
    } catch (err) {
      const poison = this.deps.isPoison?.(err) ?? false;
      // While bisecting, only the culprit is worth a report.
      if (!poison || items.length === 1) this.deps.onError(err);
      if (!poison) return items;
      if (items.length > 1) {
        const half = Math.ceil(items.length / 2);
        const first = await this.flushOrIsolate(items.slice(0, half));
        if (first.length > 0) return first.concat(items.slice(half));
        return this.flushOrIsolate(items.slice(half));
      }
      const replacement = this.deps.quarantine?.(items[0]!, err) ?? items[0]!;
      try {
        this.deps.onFlushed([replacement], await this.deps.flush([replacement]));
      } catch (again) {
        this.deps.onError(again);
        if (!(this.deps.isPoison?.(again) ?? false)) return items;
        // Refused even as a plain failure: leave the receipt open for rescue.
        this.deps.onFlushed(items, new Set());
      }
      return [];
    }
  }

  private notifyIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
