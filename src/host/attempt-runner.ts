import type { SpanContext } from '@opentelemetry/api';
import { UnknownKindError } from '../model/errors.js';
import { Snooze, WaitForChildren } from '../model/outcomes.js';
import { encodeResult } from '../model/payload.js';
import { EncodedResult } from '../model/result.js';
import type { ClaimBatch, ClaimedJob } from '../storage/index.js';
import { runInSpan, type ConsumerTelemetry, type HostSettlement } from '../telemetry/index.js';
import type { Attempt, AttemptTracker } from './attempts.js';
import type { HeldJob } from './claim-ahead.js';
import { jobContext, type ContextDeps } from './job-context.js';
import { jobView } from './job-view.js';
import { decide, errorRecord } from './outcome.js';
import type { ReceiptBook } from './receipt-book.js';
import type { HandlerRegistry } from './registry.js';
import { settlementOf } from './settlements.js';
import type { HostStats } from './stats.js';

// The attempt runner owns one claimed job from the moment its dispatcher gives it a permit to its settlement:
// it starts the handler (or snoozes a kind nobody here handles), enforces the kind's deadline, turns what the
// handler did into an outcome, queues that settlement and gives the permit back. An attempt closed elsewhere
// (operator cancel, rescue) is aborted and its permit returned at once.

/** What a handler's signal is aborted with when its attempt passes the kind's deadline. */
export class DeadlineExceeded extends Error {
  constructor(kind: string, ms: number) {
    super(`job kind "${kind}" exceeded its ${ms} ms deadline`);
    this.name = 'DeadlineExceeded';
  }
}

export interface AttemptRunnerDeps {
  instanceId: string;
  unknownKindDelayMs: number;
  registry: HandlerRegistry;
  attempts: AttemptTracker;
  receipts: ReceiptBook;
  stats: HostStats;
  telemetry: ConsumerTelemetry;
  context: ContextDeps;
  /** The receive span of the claim that took `batch`, for the attempt's span to link to. */
  claimSpan(batch: ClaimBatch): SpanContext | null;
  /** Queues a settlement for the settle batcher's next flush. */
  queueSettlement(result: HostSettlement): void;
  /** Gives a permit of `queue` back to its dispatcher. */
  release(queue: string): void;
  /** Drops a job some dispatcher holds for a permit; returns it, or null when none holds it. */
  forgetHeld(jobId: string, runLease: number): (HeldJob & { queue: string }) | null;
  reportError(err: unknown): void;
}

export class AttemptRunner {
  private readonly warnedKinds = new Set<string>();

  constructor(private readonly deps: AttemptRunnerDeps) {}

  /** Runs a job that holds a permit of `queue`. */
  start(queue: string, batch: ClaimBatch, c: ClaimedJob): void {
    const d = this.deps;
    const now = Date.now();
    d.stats.recordPickup(now - c.readyAtMs);
    const entry = d.registry.get(c.kind);
    if (!entry) return this.snoozeUnknownKind(queue, batch, c, now);
    const exec = d.telemetry.startProcess(queue, c, d.claimSpan(batch));
    const attempt = d.attempts.begin(queue, batch, c, exec);
    const ctx = jobContext(attempt, d.context);
    const deadlineMs = entry.kind.deadlineMs;
    if (deadlineMs > 0) {
      attempt.deadlineTimer = setTimeout(() => {
        const err = new DeadlineExceeded(c.kind, deadlineMs);
        attempt.abort(err);
        // The handler may never return: settle now; whatever it does later is ignored.
        this.complete(attempt, err, true);
      }, deadlineMs);
    }
    try {
      // The handler runs in its span's context, so the spans it starts are the execution's children.
      const result = runInSpan(exec.parent, exec.span, () => entry.handle(jobView(queue, c), ctx));
      // What the handler returned is its own: reading its `then` or calling it may throw too (a revoked
      // proxy, a hostile thenable). That fails this attempt; it must not escape into the claim loop, which
      // would leave the rest of the batch unstarted and holding its permits.
      if (!isThenable(result)) return this.complete(attempt, undefined, false, result);
      result.then(
        (value) => this.complete(attempt, undefined, false, value),
        (err: unknown) => this.complete(attempt, err, true),
      );
    } catch (err) {
      this.complete(attempt, err, true);
    }
  }

  /** A claimed job that never started goes back to its queue (a snooze: no attempt spent; it held no permit). */
  handBack(queue: string, batch: ClaimBatch, c: ClaimedJob): void {
    this.deps.queueSettlement(settlementOf(queue, batch, c, 'snooze', new Date()));
  }

  /**
   * The attempt was settled by someone else (operator cancel, rescue): abort its handler and give its
   * permit back now. A handler that ignores its signal keeps running, but no longer holds the queue's
   * capacity, and whatever it returns is ignored (the fence would reject it anyway).
   */
  closedElsewhere(jobId: string, runLease: number): void {
    const d = this.deps;
    const attempt = d.attempts.abort(jobId, runLease, new Error('attempt cancelled or rescued elsewhere'));
    if (!attempt) return this.forgetHeld(jobId, runLease);
    if (attempt.settled) return;
    attempt.settled = true;
    d.attempts.end(attempt);
    d.receipts.answered(attempt.batch.batchId);
    d.stats.stale++;
    d.telemetry.endProcess(attempt.telemetry, attempt.queue, attempt.job.kind, 'stale', undefined);
    d.telemetry.closedElsewhere(attempt.queue, attempt.job.kind);
    d.release(attempt.queue);
  }

  /**
   * The handler began a durable sleep (ctx.sleep): its attempt ends now as a snooze until `wakeAt` (no attempt
   * spent) and its permit is given back, whatever the handler does next (as after a deadline, that is ignored).
   */
  park(attempt: Attempt, wakeAt: Date): void {
    const delayMs = Math.max(0, wakeAt.getTime() - Date.now());
    this.complete(attempt, new Snooze(delayMs, `sleeping until ${wakeAt.toISOString()}`), true);
  }

  /** The handler called ctx.waitForChildren() while children it spawned run: its attempt ends now, blocked until
   * they have all ended (no attempt spent), and its permit is given back. */
  block(attempt: Attempt): void {
    this.complete(attempt, new WaitForChildren(1), true);
  }

  /** The attempt completed in the handler's own transaction (ctx.transaction), which has committed: the
   * database holds its completion, so nothing is queued; its permit is given back. */
  completedInTransaction(attempt: Attempt): void {
    if (attempt.settled) return;
    attempt.settled = true;
    const d = this.deps;
    d.attempts.end(attempt);
    d.receipts.answered(attempt.batch.batchId);
    d.telemetry.endProcess(attempt.telemetry, attempt.queue, attempt.job.kind, 'completed', undefined);
    d.release(attempt.queue);
  }

  /** An attempt closed elsewhere before it started (held for a permit): drop it unstarted. */
  private forgetHeld(jobId: string, runLease: number): void {
    const held = this.deps.forgetHeld(jobId, runLease);
    if (!held) return;
    this.deps.receipts.answered(held.batch.batchId);
    this.deps.stats.stale++;
    this.deps.telemetry.closedElsewhere(held.queue, held.job.kind);
  }

  /** `value`: what the handler returned, when it did not throw: its result. */
  private complete(attempt: Attempt, thrown: unknown, failed: boolean, value?: unknown): void {
    if (attempt.settled) return;
    attempt.settled = true;
    this.deps.attempts.end(attempt);
    const c = attempt.job;
    let result: string | undefined;
    if (!failed && value !== undefined) {
      // A result that cannot be stored (too large, not JSON) fails the attempt as if the handler had thrown
      // it: storing something else, or nothing, would lose what the handler meant without a word.
      try {
        result = resultOf(c.kind, value);
      } catch (err) {
        thrown = err;
        failed = true;
      }
    }
    let d = decide(thrown, failed, c.attempt, c.maxAttempts);
    if (d.outcome === 'wait' && !attempt.callbackToken) {
      const err = new Error('WaitForCallback without a callback: call ctx.registerCallback() first');
      err.name = 'InvalidOutcome';
      d = decide(err, true, c.attempt, c.maxAttempts);
      thrown = err;
    }
    this.deps.telemetry.endProcess(attempt.telemetry, attempt.queue, c.kind, d.outcome, thrown);
    this.settle(
      settlementOf(
        attempt.queue,
        attempt.batch,
        c,
        d.outcome,
        d.runAt,
        d.error,
        d.outcome === 'completed' ? result : undefined,
      ),
    );
  }

  /** A kind no handler here knows: snooze it (no attempt spent) so a host that knows it can run it. */
  private snoozeUnknownKind(queue: string, batch: ClaimBatch, c: ClaimedJob, now: number): void {
    const d = this.deps;
    if (!this.warnedKinds.has(c.kind)) {
      this.warnedKinds.add(c.kind);
      d.reportError(new UnknownKindError(c.kind, d.registry.kinds(), d.unknownKindDelayMs));
    }
    const error = errorRecord(
      new Error(`unknown job kind "${c.kind}" on instance ${d.instanceId}`),
      c.attempt,
      now,
    );
    this.settle(settlementOf(queue, batch, c, 'snooze', new Date(now + d.unknownKindDelayMs), error));
  }

  /** Queues a started job's settlement and gives its permit back. */
  private settle(result: HostSettlement): void {
    this.deps.queueSettlement(result);
    this.deps.release(result.queue);
  }
}

/** The JSON text to store for what a handler returned: undefined when nothing is (undefined, null, or an outcome
 * such as WaitForCallback returned rather than thrown); already encoded when it comes from a pool thread. */
function resultOf(kind: string, value: unknown): string | undefined {
  if (value instanceof EncodedResult) return value.json;
  if (value instanceof Error) return undefined;
  return encodeResult(kind, value);
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
