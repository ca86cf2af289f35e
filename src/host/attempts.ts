import type { ClaimBatch, ClaimedJob } from '../storage/index.js';
import type { ProcessScope } from '../telemetry/index.js';

// The attempts running in this process, so a cancel notification, a rescue, a deadline or a shutdown
// can reach the right handler's signal. The AbortController is created only when someone asks for the
// signal or aborts it: most short handlers never look.

export class Attempt {
  private controller: AbortController | null = null;
  private abortedWith: unknown = undefined;
  /** Set once the attempt's result has been handed to the batcher; later results are ignored. */
  settled = false;
  deadlineTimer: NodeJS.Timeout | null = null;
  /** The external callback this attempt registered last (ctx.registerCallback). */
  callbackToken: string | null = null;
  /** ctx.transaction() was called: the attempt completes with that transaction, once. */
  inTransaction = false;

  constructor(
    readonly queue: string,
    readonly batch: ClaimBatch,
    readonly job: ClaimedJob,
    /** Its execution span and start time. */
    readonly telemetry: ProcessScope,
  ) {}

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortedWith !== undefined) this.controller.abort(this.abortedWith);
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.abortedWith !== undefined) return;
    this.abortedWith = reason;
    this.controller?.abort(reason);
  }
}

export class AttemptTracker {
  private readonly running = new Map<string, Attempt>();

  get size(): number {
    return this.running.size;
  }

  begin(queue: string, batch: ClaimBatch, job: ClaimedJob, telemetry: ProcessScope): Attempt {
    const attempt = new Attempt(queue, batch, job, telemetry);
    this.running.set(job.id, attempt);
    return attempt;
  }

  end(attempt: Attempt): void {
    if (attempt.deadlineTimer) clearTimeout(attempt.deadlineTimer);
    if (this.running.get(attempt.job.id) === attempt) this.running.delete(attempt.job.id);
  }

  /** Aborts the handler of attempt (jobId, runLease) if it runs here, and returns that attempt. */
  abort(jobId: string, runLease: number, reason: unknown): Attempt | null {
    const attempt = this.running.get(jobId);
    if (!attempt || attempt.job.runLease !== runLease) return null;
    attempt.abort(reason);
    return attempt;
  }

  /** Attempts running now per queue (for the in-flight gauge: O(running), read only when collected). */
  byQueue(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const a of this.running.values()) counts.set(a.queue, (counts.get(a.queue) ?? 0) + 1);
    return counts;
  }

  abortAll(reason: unknown): void {
    for (const attempt of this.running.values()) attempt.abort(reason);
  }
}
