import type { ClaimBatch, ClaimedJob, ClaimResult } from '../storage/index.js';
import { AHEAD_HORIZON_MS, HOLD_MAX_MS, ClaimWait, HeldJobs, Pace, type HeldJob } from './claim-ahead.js';

// One per queue. Holds the queue's permits: every running job holds one. It claims as many jobs as it has
// free permits plus, under a backlog, a few it may hold ahead of a permit (claim-ahead.ts), claims again
// straight away while batches come back full, and otherwise waits for a wake-up (notification, poll tick, or
// enough permits coming back). What it is doing at any moment is its mode (Mode, below).

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
/** How soon to claim again after a claim failed; doubled while claims keep failing, up to the max. */
const ERROR_RETRY_MS = 100;
const ERROR_RETRY_MAX_MS = 5_000;
/** With a backlog, on a host whose permits for the queue and what it may hold ahead fit in one claim batch
 * (several hosts sharing a queue each have a few hundred), how long freed room waits for more before a claim
 * that is not a full batch: fast handlers give a full batch back within a millisecond or two, and every claim
 * carries a fixed cost and a turn on a lane; a slow handler holds back a quarter of the room this long at
 * most. A host with more room than a batch claims at a quarter at once, as its claims are large anyway. */
const COALESCE_MS = 2;

/**
 * What the dispatcher is doing, which decides what a wake-up does: only 'waiting' claims at once, 'claiming'
 * claims once more when its claim returns (never two claims at a time), and the other modes let it pass.
 */
type Mode =
  /** Claims nothing: before start(), and after stopClaiming() once no claim is in flight. */
  | { readonly name: 'stopped' }
  /** Started, no claim in flight: the next wake-up (notification, poll, echo, freed permits) claims. */
  | { readonly name: 'waiting' }
  /** A claim loop runs. `again`: a wake-up came during its claim, so it claims once more even if that claim
   * came back short. */
  | { readonly name: 'claiming'; again: boolean }
  /** stopClaiming() came during a claim: what the claim returns is handed back, then 'stopped'. */
  | { readonly name: 'stopping'; readonly again: boolean }
  /** A claim failed, or another claimer held a lane: wake-ups pass until `retry` fires, then it claims. */
  | { readonly name: 'backing-off'; readonly retry: NodeJS.Timeout };

export type DispatcherMode = Mode['name'];

const STOPPED: Mode = { name: 'stopped' };
const WAITING: Mode = { name: 'waiting' };

/** What a claim loop does after a claim: claim again at once, wait for a wake-up, or back off until the
 * timer fires. */
type AfterClaim = 'claim again' | 'wait' | NodeJS.Timeout;

export class Dispatcher {
  private current: Mode = STOPPED;
  /** Jobs started and not yet released: the permits in use. */
  private inFlight = 0;
  /** Jobs asked for by the claim in flight. */
  private pending = 0;
  private readonly heldJobs = new HeldJobs();
  private readonly pace = new Pace();
  private readonly claimWait = new ClaimWait();
  /** Re-entrancy guard of startHeld(), in any mode: a handler may finish, and so release(), in execute(). */
  private startingHeld = false;
  /** Ticks in every started mode (polling is the truth when a wake-up is lost); wake() reads the mode. */
  private pollTimer: NodeJS.Timeout | null = null;
  /** Echoes come due whatever the mode: during a claim one asks for one more round, while backing off it is
   * spent unclaimed. */
  private echoTimer: NodeJS.Timeout | null = null;
  /** Armed when a limited queue's claim left jobs waiting for their limits: claims again when it said a window
   * opens (or a slot may have freed on another host). Not a back-off: a permit freed here claims at once. */
  private limitTimer: NodeJS.Timeout | null = null;
  /** Echo claims still owed (see ECHO_MS). */
  private echoRounds = 0;
  /** Armed by release() in any started mode, beside a claim or a back-off; the next claim cancels it. */
  private coalesceTimer: NodeJS.Timeout | null = null;
  /** The hand-back deadline of the oldest held job: about held jobs, not claiming. */
  private holdTimer: NodeJS.Timeout | null = null;
  /** The next back-offs (after an error, after a busy lane): they grow across back-offs, so outlive them. */
  private errorDelayMs = 0;
  private contendedDelayMs = 0;
  private idleWaiters: (() => void)[] = [];
  /**
   * True when the last claim loop stopped for lack of room (or under backpressure) rather than
   * because the queue ran dry: only then is a freed permit worth a claim. Otherwise the next
   * notification or poll brings the work, and an idle queue costs no claim per finished job. Not a mode:
   * it is what the claims saw of the queue, and release() and resume() read it whatever the mode.
   */
  private mayHaveMore = false;
  /** The queue's limits include a rate, as its last claim said: then nothing is held ahead of a permit. A rate
   * counts a start at its claim, so a held job would start after the window it was counted in and its
   * handler, with the next window's, could see more starts in a second than the limit allows. */
  private rateLimited = false;

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

  /** What it is doing (see Mode), for tests and diagnostics. */
  get mode(): DispatcherMode {
    return this.current.name;
  }

  start(): void {
    this.current = this.afterStart();
    this.pollTimer = setInterval(() => this.wake(), this.pollIntervalMs);
    this.wake();
  }

  /** Stop claiming and hand back the jobs held for a permit; running jobs carry on. */
  stopClaiming(): void {
    this.current = this.afterStop();
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.echoTimer) clearTimeout(this.echoTimer);
    if (this.limitTimer) clearTimeout(this.limitTimer);
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.clearCoalesce();
    this.pollTimer = this.echoTimer = this.holdTimer = this.limitTimer = null;
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
    const m = this.current;
    if (m.name === 'waiting') void this.claimLoop();
    // One claim at a time: a wake-up during a claim is one more round after it.
    else if (m.name === 'claiming') m.again = true;
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

  /** Results were flushed: if claiming paused under backpressure, resume. */
  resume(): void {
    if (this.mayHaveMore) this.wake();
  }

  /** A job of this queue finished (its result is queued for flushing): its permit goes to a held job, if any. */
  release(): void {
    this.inFlight--;
    const now = Date.now();
    this.pace.finished(now);
    this.claimWait.finished(now);
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

  // Mode transitions: each after*() returns the mode an event leaves; the event's method assigns it.

  /** The mode start() leaves: a claim still in flight carries on. */
  private afterStart(): Mode {
    const m = this.current;
    if (m.name === 'stopping') return { name: 'claiming', again: m.again };
    return m.name === 'stopped' ? WAITING : m;
  }

  /** The mode stopClaiming() leaves: a claim in flight finishes as 'stopping'; a back-off is called off. */
  private afterStop(): Mode {
    const m = this.current;
    if (m.name === 'claiming' || m.name === 'stopping') return { name: 'stopping', again: m.again };
    if (m.name === 'backing-off') clearTimeout(m.retry);
    return STOPPED;
  }

  /** The mode a claim loop ends in (told to stop meanwhile, it armed no retry: see backOff()). */
  private afterClaims(retry: NodeJS.Timeout | null): Mode {
    if (this.stopped) return STOPPED;
    return retry ? { name: 'backing-off', retry } : WAITING;
  }

  /** A back-off is over: claim, unless claiming stopped meanwhile. */
  private retryDue(): void {
    this.current = this.afterRetry();
    this.wake();
  }

  /** Only 'backing-off' has a retry pending (stopClaiming() clears it). */
  private afterRetry(): Mode {
    return this.current.name === 'backing-off' ? WAITING : this.current;
  }

  /** Neither claims nor wakes: 'stopped', or 'stopping' with a claim in flight. */
  private get stopped(): boolean {
    return this.current.name === 'stopped' || this.current.name === 'stopping';
  }

  /** A claim loop runs (it may have been told to stop). */
  private get claimInFlight(): boolean {
    return this.current.name === 'claiming' || this.current.name === 'stopping';
  }

  private wokenDuringClaim(): boolean {
    const m = this.current;
    return (m.name === 'claiming' || m.name === 'stopping') && m.again;
  }

  // The claim loop: the 'claiming' and 'stopping' modes.

  /**
   * The 'claiming' mode: claims while batches come back full or wake-ups come during the claims, then waits
   * or backs off. Everything between two claims runs in one go (no await but the claim's), so a wake-up
   * never falls between a loop's last claim and its end.
   */
  private async claimLoop(): Promise<void> {
    this.current = { name: 'claiming', again: false };
    let retry: NodeJS.Timeout | null = null;
    try {
      while (!this.stopped) {
        const max = this.beginClaim();
        if (max === null) break;
        let result: ClaimResult;
        const claimedAt = Date.now();
        try {
          result = await this.deps.claim(this.queue, max);
        } catch (err) {
          this.deps.onError(err);
          // A stop that came during the claim leaves nothing armed: the timer would hold the process open.
          if (!this.stopped) retry = this.backOff();
          break;
        } finally {
          this.pending = 0;
        }
        this.claimWait.claimed(Date.now() - claimedAt);
        const next = this.claimed(result, max);
        if (next === 'claim again') continue;
        if (next !== 'wait') retry = next;
        break;
      }
    } finally {
      this.current = this.afterClaims(retry);
      if (this.isIdle()) this.notifyIdle();
    }
  }

  /** How many jobs the next claim asks for, or null when there is no room or results are piling up. */
  private beginClaim(): number | null {
    const room = this.capacity(Date.now()) - this.inFlight - this.heldJobs.size;
    if (room <= 0 || this.deps.backpressure()) {
      this.mayHaveMore = true;
      return null;
    }
    const max = Math.min(room, this.batchSize);
    this.clearCoalesce();
    if (this.current.name === 'claiming') this.current.again = false;
    this.pending = max;
    return max;
  }

  /** Takes what a claim returned and says what the loop does next. */
  private claimed({ batches, contended, limitedRetryMs, rateLimited }: ClaimResult, max: number): AfterClaim {
    this.errorDelayMs = 0;
    if (rateLimited !== undefined) this.rateLimited = rateLimited;
    if (!contended) this.contendedDelayMs = 0;
    let got = 0;
    for (const b of batches) got += b.jobs.length;
    this.mayHaveMore = got === max || contended || limitedRetryMs !== undefined;
    this.take(batches);
    if (got >= max || this.wokenDuringClaim()) return 'claim again';
    // Jobs wait for the queue's limits (docs/flow-control.md): claim again when the claim said a limit opens, and
    // meanwhile wait, not back off, so a permit freed here claims at once (mayHaveMore).
    if (limitedRetryMs !== undefined) {
      if (!this.stopped) this.claimWhenLimitsOpen(limitedRetryMs);
      return 'wait';
    }
    // Another host is claiming this queue's lane right now: come back as soon as its claim is done
    // rather than wait for a notification that will not come for a backlog.
    if (contended) return this.stopped ? 'wait' : this.retrySoon();
    // Jobs are trickling in: look again shortly for those whose producers skipped their wake-up.
    if (got > 0) {
      this.echoRounds = Math.max(this.echoRounds, 1);
      this.echo();
    }
    return 'wait';
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
          this.claimWait.started(now);
          this.deps.execute(this.queue, b, job);
        } else if (b.bulk === false) this.heldJobs.pushAhead(b, job, now);
        else this.heldJobs.push(b, job, now);
      }
    this.startHeld(Date.now());
    this.watchHeld();
  }

  private claimWhenLimitsOpen(ms: number): void {
    if (this.limitTimer) clearTimeout(this.limitTimer);
    this.limitTimer = setTimeout(() => {
      this.limitTimer = null;
      this.wake();
    }, ms);
  }

  private retrySoon(): NodeJS.Timeout {
    this.contendedDelayMs = Math.min(
      Math.max(this.contendedDelayMs * 2, CONTENDED_RETRY_MS),
      CONTENDED_RETRY_MAX_MS,
    );
    return setTimeout(() => this.retryDue(), this.contendedDelayMs);
  }

  private backOff(): NodeJS.Timeout {
    this.errorDelayMs = Math.min(Math.max(this.errorDelayMs * 2, ERROR_RETRY_MS), ERROR_RETRY_MAX_MS);
    return setTimeout(() => this.retryDue(), this.errorDelayMs);
  }

  /** Permits plus what may be held ahead of them: what finishes in AHEAD_HORIZON_MS at the queue's recent
   * pace, or what is expected to finish while the claim is in flight, whichever is more (none under a rate). */
  private capacity(nowMs: number): number {
    if (this.rateLimited) return this.concurrency;
    const ahead = Math.min(
      this.prefetch,
      Math.max(
        Math.floor(this.pace.perMs(nowMs) * AHEAD_HORIZON_MS),
        this.claimWait.expected(this.inFlight, nowMs),
      ),
    );
    return this.concurrency + ahead;
  }

  // Wake-ups on a timer, which any started mode may have pending (see the fields).

  private echo(): void {
    if (this.echoTimer || this.stopped || this.echoRounds <= 0) return;
    this.echoTimer = setTimeout(() => {
      this.echoTimer = null;
      this.echoRounds--;
      this.wake();
      this.echo();
    }, ECHO_MS);
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

  // Held jobs.

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
        this.claimWait.started(nowMs);
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
    return this.inFlight === 0 && this.heldJobs.size === 0 && !this.claimInFlight;
  }

  private notifyIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}
