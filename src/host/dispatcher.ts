import type { ClaimBatch, ClaimedJob, ClaimResult } from '../storage/index.js';
import { AHEAD_HORIZON_MS, HOLD_MAX_MS, HeldJobs, Pace, type HeldJob } from './claim-ahead.js';

// One per queue. Holds the queue's permits: every running job holds one. It claims as many jobs as it has
// free permits plus, under a backlog, a few it may hold ahead of a permit (claim-ahead.ts), claims again
// straight away while batches come back full, and otherwise waits for a wake-up (notification, poll tick, or
// enough permits coming back).

export interface DispatcherDeps {
  claim(queue: string, max: number): Promise<ClaimResult>;
  /** Runs a claimed job; it holds a permit until the host calls release(). */
  execute(queue: string, batch: ClaimBatch, job: ClaimedJob): void;
  /** Gives a claimed job that never started back to the queue, no attempt spent (holds no permit). */
  handBack(queue: string, batch: ClaimBatch, job: ClaimedJob): void;
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
/** With a backlog, on a host whose permits for the queue and what it may hold ahead fit in one claim batch
 * (several hosts sharing a queue each have a few hundred), how long freed room waits for more before a claim
 * that is not a full batch: fast handlers give a full batch back within a millisecond or two, and every claim
 * carries a fixed cost and a turn on a lane; a slow handler holds back a quarter of the room this long at
 * most. A host with more room than a batch claims at a quarter at once, as its claims are large anyway. */
const COALESCE_MS = 2;

export class Dispatcher {
  /** Jobs started and not yet released: the permits in use. */
  private inFlight = 0;
  /** Jobs asked for by the claim in flight. */
  private pending = 0;
  private readonly heldJobs = new HeldJobs();
  private readonly pace = new Pace();
  private claiming = false;
  private startingHeld = false;
  private again = false;
  private stopped = true;
  private pollTimer: NodeJS.Timeout | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private echoTimer: NodeJS.Timeout | null = null;
  private coalesceTimer: NodeJS.Timeout | null = null;
  private holdTimer: NodeJS.Timeout | null = null;
  private errorDelayMs = 0;
  private contendedDelayMs = 0;
  /** Echo claims still owed (see ECHO_MS). */
  private echoRounds = 0;
  private idleWaiters: (() => void)[] = [];
  /**
   * True when the last claim loop stopped for lack of room (or under backpressure) rather than
   * because the queue ran dry: only then is a freed permit worth a claim. Otherwise the next
   * notification or poll brings the work, and an idle queue costs no claim per finished job.
   */
  private mayHaveMore = false;

  constructor(
    readonly queue: string,
    private readonly concurrency: number,
    private readonly batchSize: number,
    private readonly pollIntervalMs: number,
    /** Most jobs held ahead of a permit (0: claim only for free permits). */
    private readonly prefetch: number,
    private readonly deps: DispatcherDeps,
  ) {}

  get running(): number {
    return this.inFlight;
  }

  /** Jobs claimed and held for a permit. */
  get held(): number {
    return this.heldJobs.size;
  }

  start(): void {
    this.stopped = false;
    this.pollTimer = setInterval(() => this.wake(), this.pollIntervalMs);
    this.wake();
  }

  /** Stop claiming and hand back the jobs held for a permit; running jobs carry on. */
  stopClaiming(): void {
    this.stopped = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.echoTimer) clearTimeout(this.echoTimer);
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.clearCoalesce();
    this.pollTimer = this.retryTimer = this.echoTimer = this.holdTimer = null;
    for (const h of this.heldJobs.takeAll()) this.deps.handBack(this.queue, h.batch, h.job);
  }

  /** Resolves when no job of this queue is running or held. */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** The attempt was closed elsewhere (cancel, rescue): if it is held here, it is dropped, unstarted. */
  forget(jobId: string, runLease: number): HeldJob | null {
    const item = this.heldJobs.remove(jobId, runLease);
    if (item && this.isIdle()) this.notifyIdle();
    return item;
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

  /** A job of this queue finished (its result is queued for flushing): its permit goes to a held job, if any. */
  release(): void {
    this.inFlight--;
    const now = Date.now();
    this.pace.finished(now);
    this.startHeld(now);
    if (this.mayHaveMore) {
      // Under a backlog a claim waits for a quarter of a full claim of room (and, when a full claim is one
      // batch or less, for a full claim or COALESCE_MS): claims stay large without leaving permits idle long.
      const capacity = this.capacity(now);
      const full = Math.min(this.batchSize, capacity);
      const room = capacity - this.inFlight - this.pending - this.heldJobs.size;
      if (room >= full || this.inFlight + this.pending + this.heldJobs.size === 0) this.wake();
      else if (room >= Math.ceil(full / 4)) {
        if (capacity <= this.batchSize) this.coalesce();
        else this.wake();
      }
    }
    if (this.isIdle()) this.notifyIdle();
  }

  /** Permits plus what may be held ahead of them at the queue's recent pace. */
  private capacity(nowMs: number): number {
    const ahead = Math.min(this.prefetch, Math.floor(this.pace.perMs(nowMs) * AHEAD_HORIZON_MS));
    return this.concurrency + ahead;
  }

  /**
   * Starts held jobs, oldest first, while permits are free (iteratively: a handler may finish at once). A job
   * held HOLD_MAX_MS or more goes back instead: its hand-back timer is overdue, so this thread stood still
   * (a blocked event loop, a stopped process) long enough for the job to have been rescued elsewhere.
   */
  private startHeld(nowMs: number): void {
    if (this.startingHeld || this.heldJobs.size === 0) return;
    this.startingHeld = true;
    const staleBefore = nowMs - HOLD_MAX_MS;
    try {
      while (this.inFlight < this.concurrency && this.heldJobs.size > 0 && !this.stopped) {
        const h = this.heldJobs.shift()!;
        if (h.heldAtMs <= staleBefore) {
          this.deps.handBack(this.queue, h.batch, h.job);
          continue;
        }
        this.inFlight++;
        this.deps.execute(this.queue, h.batch, h.job);
      }
    } finally {
      this.startingHeld = false;
    }
  }

  /** Jobs held since HOLD_MAX_MS ago go back to the queue: this host's handlers have slowed down. */
  private watchHeld(): void {
    const oldest = this.heldJobs.oldestMs();
    if (this.holdTimer || this.stopped || oldest === null) return;
    this.holdTimer = setTimeout(
      () => {
        this.holdTimer = null;
        for (const h of this.heldJobs.takeHeldBefore(Date.now() - HOLD_MAX_MS + 1))
          this.deps.handBack(this.queue, h.batch, h.job);
        if (this.isIdle()) this.notifyIdle();
        this.watchHeld();
      },
      Math.max(1, oldest + HOLD_MAX_MS - Date.now()),
    );
  }

  private isIdle(): boolean {
    return this.inFlight === 0 && this.heldJobs.size === 0 && !this.claiming;
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
        const room = this.capacity(Date.now()) - this.inFlight - this.heldJobs.size;
        if (room <= 0 || this.deps.backpressure()) {
          this.mayHaveMore = true;
          break;
        }
        const max = Math.min(room, this.batchSize);
        this.clearCoalesce();
        this.again = false;
        this.pending = max;
        let result: ClaimResult;
        try {
          result = await this.deps.claim(this.queue, max);
        } catch (err) {
          this.deps.onError(err);
          this.backOff();
          break;
        } finally {
          this.pending = 0;
        }
        this.errorDelayMs = 0;
        const { batches, contended } = result;
        if (!contended) this.contendedDelayMs = 0;
        let got = 0;
        for (const b of batches) got += b.jobs.length;
        this.mayHaveMore = got === max || contended;
        this.take(batches);
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
      if (this.isIdle()) this.notifyIdle();
    }
  }

  /** Starts what free permits allow, in claim order, and holds the rest: behind jobs already held, or, for a
   * live lane's jobs, ahead of held bulk ones. A claim that was in flight when claiming stopped hands its jobs
   * back unstarted. */
  private take(batches: readonly ClaimBatch[]): void {
    const now = Date.now();
    for (const b of batches)
      for (const job of b.jobs) {
        if (this.stopped) this.deps.handBack(this.queue, b, job);
        else if (this.heldJobs.size === 0 && this.inFlight < this.concurrency) {
          this.inFlight++;
          this.deps.execute(this.queue, b, job);
        } else if (b.bulk === false) this.heldJobs.pushAhead(b, job, now);
        else this.heldJobs.push(b, job, now);
      }
    this.startHeld(Date.now());
    this.watchHeld();
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
