import type { Settlement } from '../storage/index.js';

// Group commit for attempt results: settlements queue here and are flushed as one finish() call when
// `batchSize` are waiting or `flushMs` has passed, with one flush in flight at a time (results that
// arrive meanwhile form the next batch). A failed flush is retried with backoff: the fencing token
// makes a replay harmless, and a settlement is only dropped once the database has answered for it.

export interface BatcherDeps {
  flush(items: readonly Settlement[]): Promise<Set<string>>;
  /** Reports each flush: what was accepted and what the fence rejected as stale. */
  onFlushed(items: readonly Settlement[], accepted: Set<string>): void;
  onError(err: unknown): void;
}

export class CompletionBatcher {
  private pending: Settlement[] = [];
  private inFlight: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private retryDelayMs = 0;
  private idleWaiters: (() => void)[] = [];
  private closed = false;

  constructor(
    private readonly deps: BatcherDeps,
    private readonly batchSize: number,
    private readonly flushMs: number,
  ) {}

  /** Settlements accepted but not yet durable. */
  get backlog(): number {
    return this.pending.length;
  }

  /** Ignored once closed: that attempt's receipt stays open and is rescued, like a crash would leave it. */
  add(item: Settlement): void {
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

  private async runFlush(items: Settlement[]): Promise<void> {
    try {
      const accepted = await this.deps.flush(items);
      this.retryDelayMs = 0;
      this.deps.onFlushed(items, accepted);
    } catch (err) {
      this.deps.onError(err);
      if (this.closed) {
        this.pending = [];
        this.inFlight = null;
        return this.notifyIdle();
      }
      this.pending = items.concat(this.pending);
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

  private notifyIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
