import type { ClaimBatch, ClaimedJob, ClaimResult } from '../storage/index.js';

// One per queue. Holds the queue's permits: it claims only as many jobs as it has free permits (so every
// claimed job can start at once), claims again straight away while batches come back full, and
// otherwise waits for a wake-up (notification, poll tick, or enough permits coming back).

export interface DispatcherDeps {
  claim(queue: string, max: number): Promise<ClaimResult>;
  execute(queue: string, batch: ClaimBatch, job: ClaimedJob): void;
  /** True while results are piling up faster than they are flushed: claiming more would only add to it. */
  backpressure(): boolean;
  onError(err: unknown): void;
}

/** How long after a wake-up (twice), or after a claim that found jobs but not a full batch, the dispatcher
 * claims once more: the producers' wake-up spacing (see reserve_lane()). While jobs keep arriving, claims
 * follow each other at this pace, so a job whose producer skipped its wake-up waits about this long; once
 * the echoes owed find nothing the chain ends, and an idle queue costs no claim. */
const ECHO_MS = 5;
/** How soon to claim again when another claimer held a lane (a claim takes a few milliseconds); doubled
 * while it stays held (a cancel inside a long transaction holds it too), up to CONTENDED_RETRY_MAX_MS. */
const CONTENDED_RETRY_MS = 2;
const CONTENDED_RETRY_MAX_MS = 250;
/** With a backlog, on a host whose permits for the queue fit in one claim batch (several hosts sharing a queue
 * each have a few hundred), how long freed permits wait for more before a claim that is not a full batch:
 * fast handlers give a full batch back within a millisecond or two, and every claim carries a fixed cost and
 * a turn on a lane; a slow handler holds back a quarter of the permits this long at most. A host with more
 * permits than a batch claims at a quarter at once, as its claims are large anyway. */
const COALESCE_MS = 2;

export class Dispatcher {
  private inFlight = 0;
  private claiming = false;
  private again = false;
  private stopped = true;
  private pollTimer: NodeJS.Timeout | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private echoTimer: NodeJS.Timeout | null = null;
  private coalesceTimer: NodeJS.Timeout | null = null;
  private errorDelayMs = 0;
  private contendedDelayMs = 0;
  /** Echo claims still owed (see ECHO_MS). */
  private echoRounds = 0;
  private readonly refillAt: number;
  /** A full claim: what the dispatcher asks for when every permit it may use at once is free. */
  private readonly fullClaim: number;
  /** Whether partial claims under a backlog wait for more permits (see COALESCE_MS). */
  private readonly coalesces: boolean;
  private idleWaiters: (() => void)[] = [];
  /**
   * True when the last claim loop stopped for lack of permits (or under backpressure) rather than
   * because the queue ran dry: only then is a freed permit worth a claim. Otherwise the next
   * notification or poll brings the work, and an idle queue costs no claim per finished job.
   */
  private mayHaveMore = false;

  constructor(
    readonly queue: string,
    private readonly concurrency: number,
    private readonly batchSize: number,
    private readonly pollIntervalMs: number,
    private readonly deps: DispatcherDeps,
  ) {
    // Under load a claim waits for a quarter of a batch of free permits (and, on a host whose permits fit in
    // one batch, for a full batch or COALESCE_MS): claims stay large without leaving capacity idle for long.
    this.fullClaim = Math.min(batchSize, concurrency);
    this.refillAt = Math.max(1, Math.ceil(this.fullClaim / 4));
    this.coalesces = concurrency <= batchSize;
  }

  get running(): number {
    return this.inFlight;
  }

  start(): void {
    this.stopped = false;
    this.pollTimer = setInterval(() => this.wake(), this.pollIntervalMs);
    this.wake();
  }

  /** Stop claiming; running jobs carry on. */
  stopClaiming(): void {
    this.stopped = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.echoTimer) clearTimeout(this.echoTimer);
    this.clearCoalesce();
    this.pollTimer = this.retryTimer = this.echoTimer = null;
  }

  /** Resolves when no job of this queue is running. */
  idle(): Promise<void> {
    if (this.inFlight === 0 && !this.claiming) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  wake(): void {
    if (this.stopped || this.retryTimer) return;
    if (this.claiming) {
      this.again = true;
      return;
    }
    void this.claimLoop();
  }

  /**
   * A producer of this queue sent a wake-up. Claim now, and once more a little later: producers that
   * committed within a few milliseconds of it skipped their own wake-up (see reserve_lane()).
   */
  notified(): void {
    this.wake();
    // Twice: a producer that skipped its wake-up just before the echo may commit just after it.
    this.echoRounds = Math.max(this.echoRounds, 2);
    this.echo();
  }

  private echo(): void {
    if (this.echoTimer || this.stopped || this.echoRounds <= 0) return;
    this.echoTimer = setTimeout(() => {
      this.echoTimer = null;
      this.echoRounds--;
      this.wake();
      this.echo();
    }, ECHO_MS);
  }

  /** Results were flushed: if claiming paused under backpressure, resume. */
  resume(): void {
    if (this.mayHaveMore) this.wake();
  }

  /** A job of this queue finished (its result is queued for flushing). */
  release(): void {
    this.inFlight--;
    const free = this.concurrency - this.inFlight;
    if (this.mayHaveMore) {
      if (free >= this.fullClaim || this.inFlight === 0) this.wake();
      else if (free >= this.refillAt) {
        if (this.coalesces) this.coalesce();
        else this.wake();
      }
    }
    if (this.inFlight === 0 && !this.claiming) this.notifyIdle();
  }

  /** Claim once COALESCE_MS have passed, unless a full batch of permits comes back first. */
  private coalesce(): void {
    if (this.coalesceTimer || this.stopped) return;
    this.coalesceTimer = setTimeout(() => {
      this.coalesceTimer = null;
      this.wake();
    }, COALESCE_MS);
  }

  private clearCoalesce(): void {
    if (this.coalesceTimer) clearTimeout(this.coalesceTimer);
    this.coalesceTimer = null;
  }

  private async claimLoop(): Promise<void> {
    this.claiming = true;
    try {
      while (!this.stopped) {
        const free = this.concurrency - this.inFlight;
        if (free <= 0 || this.deps.backpressure()) {
          this.mayHaveMore = true;
          break;
        }
        const max = Math.min(free, this.batchSize);
        this.clearCoalesce();
        this.again = false;
        this.inFlight += max;
        let result: ClaimResult;
        try {
          result = await this.deps.claim(this.queue, max);
        } catch (err) {
          this.inFlight -= max;
          this.deps.onError(err);
          this.backOff();
          break;
        }
        this.errorDelayMs = 0;
        const { batches, contended } = result;
        if (!contended) this.contendedDelayMs = 0;
        let got = 0;
        for (const b of batches) got += b.jobs.length;
        this.inFlight -= max - got;
        this.mayHaveMore = got === max || contended;
        for (const b of batches) for (const job of b.jobs) this.deps.execute(this.queue, b, job);
        if (got < max && contended && !this.again) {
          // Another host is claiming this queue's lane right now: come back as soon as its claim is done
          // rather than wait for a notification that will not come for a backlog.
          this.retrySoon();
          break;
        }
        if (got < max && !this.again) {
          // Jobs are trickling in: look again shortly for those whose producers skipped their wake-up.
          if (got > 0) {
            this.echoRounds = Math.max(this.echoRounds, 1);
            this.echo();
          }
          break;
        }
      }
    } finally {
      this.claiming = false;
      if (this.inFlight === 0) this.notifyIdle();
    }
  }

  private retrySoon(): void {
    if (this.retryTimer) return;
    this.contendedDelayMs = Math.min(
      Math.max(this.contendedDelayMs * 2, CONTENDED_RETRY_MS),
      CONTENDED_RETRY_MAX_MS,
    );
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.wake();
    }, this.contendedDelayMs);
  }

  private backOff(): void {
    this.errorDelayMs = Math.min(Math.max(this.errorDelayMs * 2, 100), 5_000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.wake();
    }, this.errorDelayMs);
  }

  private notifyIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
