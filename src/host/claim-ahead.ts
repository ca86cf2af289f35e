import type { ClaimBatch, ClaimedJob } from '../storage/index.js';

// Claiming ahead: a dispatcher under a backlog may claim more jobs than it has free permits and hold the rest
// here until permits come back, so its claims stay large when its concurrency is small (each claim pays a
// fixed cost and a turn on the lane). It holds only what it finishes in AHEAD_HORIZON_MS at its recent pace
// (so a held job waits about that long, and slow handlers hold nothing), or, when its claims wait their turn
// longer than that (a limited queue's claims take turns across the fleet), the running jobs it expects to
// finish while the claim waits (ClaimWait); it hands back, unstarted, a job held longer than HOLD_MAX_MS (its
// handlers slowed down after it was claimed).

/** How much work, at the queue's recent pace, a dispatcher may hold ahead of its permits. */
export const AHEAD_HORIZON_MS = 20;
/** A job held this long goes back to the queue (a snooze: no attempt spent) for any host to run. */
export const HOLD_MAX_MS = 250;
/** The pace is measured over windows this long: a slower window replaces it, a faster one is averaged in. */
const PACE_WINDOW_MS = 50;

export interface HeldJob {
  batch: ClaimBatch;
  job: ClaimedJob;
  heldAtMs: number;
}

/** Jobs claimed ahead of a permit, oldest first. */
export class HeldJobs {
  private items: HeldJob[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  push(batch: ClaimBatch, job: ClaimedJob, nowMs: number): void {
    this.items.push({ batch, job, heldAtMs: nowMs });
  }

  /**
   * Holds a live lane's job ahead of the bulk jobs already held (behind live ones held before it): a job the
   * application enqueued while a load drains is started before the load's jobs claimed earlier. It takes the
   * time of the job it goes ahead of, if older, so held jobs stay oldest first for the hand-back.
   */
  pushAhead(batch: ClaimBatch, job: ClaimedJob, nowMs: number): void {
    let at = this.head;
    while (at < this.items.length && this.items[at]!.batch.bulk !== true) at++;
    const heldAtMs = Math.min(nowMs, this.items[at]?.heldAtMs ?? nowMs);
    this.items.splice(at, 0, { batch, job, heldAtMs });
  }

  shift(): HeldJob | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head++]!;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    }
    return item;
  }

  /** When the oldest held job was held, or null when none is. */
  oldestMs(): number | null {
    return this.items[this.head]?.heldAtMs ?? null;
  }

  /** Removes and returns the jobs held since before `cutoffMs`. */
  takeHeldBefore(cutoffMs: number): HeldJob[] {
    const taken: HeldJob[] = [];
    while ((this.items[this.head]?.heldAtMs ?? cutoffMs) < cutoffMs) taken.push(this.shift()!);
    return taken;
  }

  takeAll(): HeldJob[] {
    const taken = this.items.slice(this.head);
    this.items = [];
    this.head = 0;
    return taken;
  }

  /** Removes the held attempt (`jobId`, `runLease`), if it is held here. */
  remove(jobId: string, runLease: number): HeldJob | null {
    const i = this.items.findIndex(
      (h, at) => at >= this.head && h.job.id === jobId && h.job.runLease === runLease,
    );
    if (i < 0) return null;
    const [item] = this.items.splice(i, 1);
    if (this.head >= this.items.length) this.takeAll();
    return item!;
  }
}

/** Jobs finished per millisecond, recently. */
export class Pace {
  private count = 0;
  private since = 0;
  private rate = 0;
  private lastAt = 0;

  finished(nowMs: number): void {
    if (this.since === 0) this.since = nowMs;
    this.lastAt = nowMs;
    this.count++;
    const elapsed = nowMs - this.since;
    if (elapsed < PACE_WINDOW_MS) return;
    const latest = this.count / elapsed;
    // Down at once, up by halves: holding too much behind slowed handlers costs more than holding too little.
    this.rate = this.rate === 0 || latest < this.rate ? latest : (this.rate + latest) / 2;
    this.count = 0;
    this.since = nowMs;
  }

  /** Handlers that stall stop the claiming ahead within a window, not after several: nothing finished for a
   * window's length means no pace at all (what finished before the stall says nothing about when the running
   * handlers will return), and once the current window has run longer than a window, what it has seen so far
   * caps the pace. */
  perMs(nowMs: number): number {
    if (this.since === 0 || nowMs - this.lastAt > PACE_WINDOW_MS) return 0;
    const elapsed = nowMs - this.since;
    return elapsed > PACE_WINDOW_MS ? Math.min(this.rate, this.count / elapsed) : this.rate;
  }
}

/**
 * How many of a queue's running jobs are expected to finish while its next claim is in flight: all of them when
 * its handlers run shorter than its claims take, else the share of a handler's run that a claim takes. A claim
 * that waits its turn (a limited queue's claims take turns across the fleet, tens of milliseconds under a
 * backlog) comes back to permits that emptied meanwhile; asking for those too keeps them busy, where asking
 * only for what was free when the claim started leaves them idle for every turn. Both times are recent
 * averages; a handler's run is taken as the time since the oldest start not yet matched (runs end roughly in
 * the order they began, and a long one among short ones only lowers the estimate).
 */
export class ClaimWait {
  private claimMs = 0;
  /** Null until a handler has finished. */
  private handlerMs: number | null = null;
  private starts: number[] = [];
  private head = 0;
  private lastFinishMs = 0;

  claimed(ms: number): void {
    this.claimMs = this.claimMs === 0 ? ms : this.claimMs * 0.7 + ms * 0.3;
  }

  started(nowMs: number): void {
    this.starts.push(nowMs);
  }

  finished(nowMs: number): void {
    this.lastFinishMs = nowMs;
    const startedAt = this.starts[this.head++];
    // Drop the matched starts once they are most of the array: jobs may run without a break for days.
    if (this.head >= this.starts.length) {
      this.starts = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.starts.length) {
      this.starts = this.starts.slice(this.head);
      this.head = 0;
    }
    if (startedAt === undefined) return;
    const ms = nowMs - startedAt;
    this.handlerMs = this.handlerMs === null ? ms : this.handlerMs * 0.9 + ms * 0.1;
  }

  /** Handlers that stall stop it, as they stop the pace: nothing finished for a window (or twice a handler's
   * usual run, if longer) while the oldest running job began before that. (Jobs that only just started after a
   * quiet spell, as a claim that waited its turn leaves them, are not a stall.) */
  expected(running: number, nowMs: number): number {
    if (this.handlerMs === null || running <= 0) return 0;
    const quietMs = Math.max(PACE_WINDOW_MS, 2 * this.handlerMs);
    const oldest = this.starts[this.head];
    if (nowMs - this.lastFinishMs > quietMs && oldest !== undefined && nowMs - oldest > quietMs) return 0;
    return Math.floor(running * Math.min(1, this.claimMs / Math.max(1, this.handlerMs)));
  }
}
