import {
  SpanKind,
  SpanStatusCode,
  type Context,
  type Counter,
  type Histogram,
  type Link,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';
import type { ClaimResult, ClaimedJob, Settlement } from '../storage/index.js';
import { AttributeCache } from './attribute-cache.js';
import { ATTR, DURATION_BUCKETS, METRIC, SYSTEM } from './names.js';
import { errorType } from './producer.js';
import type { TelemetryScope } from './scope.js';
import { creationContext } from './trace-context.js';

// What a worker host records on its hot path. The engine works per batch, and so does this where it can:
// a claim call records its counters once, a settle flush records one add per run of equal
// (queue, kind, outcome). Per job there is one histogram record and one span (a no-op without an SDK).

/** A settlement as the host queues it: with the queue and kind its metrics are labelled by. */
export interface HostSettlement extends Settlement {
  queue: string;
  kind: string;
}

/** How an execution ended, for the duration histogram and the span: a storage outcome, or 'stale' when
 * the attempt was closed elsewhere (cancelled, rescued) before its handler returned. */
export type ProcessOutcome = Settlement['outcome'] | 'stale';

/** One running attempt's telemetry: its span and when it started. */
export interface ProcessScope {
  span: Span;
  parent: Context;
  startedAt: number;
}

export class ConsumerTelemetry {
  private readonly consumed: Counter;
  private readonly claimBatches: Counter;
  private readonly claimDuration: Histogram;
  private readonly processDuration: Histogram;
  private readonly settledCounter: Counter;
  private readonly staleCounter: Counter;
  private readonly dlqMoved: Counter;
  private readonly flushDuration: Histogram;
  private readonly callbackRegistered: Counter;
  private readonly callbackTimedOut: Counter;
  private readonly queueAttrs = new AttributeCache((queue, error) => ({
    [ATTR.system]: SYSTEM,
    [ATTR.operationName]: 'receive',
    [ATTR.queue]: queue,
    ...(error ? { [ATTR.errorType]: error } : {}),
  }));
  private readonly processAttrs = new AttributeCache((queue, kind, outcome) => ({
    [ATTR.system]: SYSTEM,
    [ATTR.operationName]: 'process',
    [ATTR.queue]: queue,
    [ATTR.kind]: kind,
    ...(outcome ? { [ATTR.outcome]: outcome } : {}),
  }));
  private readonly spanAttrs = new AttributeCache((queue, kind) => ({
    [ATTR.system]: SYSTEM,
    [ATTR.operationName]: 'process',
    [ATTR.operationType]: 'process',
    [ATTR.queue]: queue,
    [ATTR.kind]: kind,
  }));
  private readonly jobAttrs = new AttributeCache((queue, kind, outcome) => ({
    [ATTR.queue]: queue,
    [ATTR.kind]: kind,
    ...(outcome ? { [ATTR.outcome]: outcome } : {}),
  }));

  constructor(
    private readonly scope: TelemetryScope,
    private readonly dlqQueues: ReadonlySet<string>,
  ) {
    const m = scope.meter;
    this.consumed = m.createCounter(METRIC.consumed, {
      description: 'Jobs claimed (one attempt each)',
      unit: '{message}',
    });
    this.claimBatches = m.createCounter(METRIC.claimBatches, {
      description: 'Claim receipts written (one per lane a claim call took jobs from)',
      unit: '{batch}',
    });
    this.claimDuration = m.createHistogram(METRIC.claimDuration, {
      description: 'Duration of one claim call, including the ones that found nothing',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.processDuration = m.createHistogram(METRIC.processDuration, {
      description: 'Duration of one attempt: handler start to its result being queued for the database',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.settledCounter = m.createCounter(METRIC.settled, {
      description: 'Attempt results the database accepted, by outcome (completed, retry, failed, …)',
      unit: '{job}',
    });
    this.staleCounter = m.createCounter(METRIC.stale, {
      description: 'Attempt results the fence rejected (the attempt was cancelled or rescued meanwhile)',
      unit: '{job}',
    });
    this.dlqMoved = m.createCounter(METRIC.dlqMoved, {
      description: 'Jobs that failed for good in a DLQ queue and went to the dead-letter queue',
      unit: '{job}',
    });
    this.flushDuration = m.createHistogram(METRIC.flushDuration, {
      description: 'Duration of one settle flush (one settle_attempts() call for a batch of results)',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.callbackRegistered = m.createCounter(METRIC.callbackRegistered, {
      description: 'External callbacks registered by handlers',
      unit: '{callback}',
    });
    this.callbackTimedOut = m.createCounter(METRIC.callbackTimedOut, {
      description: 'External callbacks that timed out (parked jobs: by the leader; waits: in the handler)',
      unit: '{callback}',
    });
  }

  /**
   * A claim call answered. Returns the context of its `receive` span for the attempts to link to, or null
   * (nothing claimed, or no span recorded). The span is made after the fact (with the call's start time) so
   * the empty claims of an idle queue make none.
   */
  claimed(queue: string, result: ClaimResult, startedAtMs: number, startedAt: number): SpanContext | null {
    this.claimDuration.record((performance.now() - startedAt) / 1000, this.queueAttrs.get(queue));
    let got = 0;
    for (const b of result.batches) got += b.jobs.length;
    if (got === 0) return null;
    const attrs = this.queueAttrs.get(queue);
    this.consumed.add(got, attrs);
    this.claimBatches.add(result.batches.length, attrs);
    const span = this.scope.tracer.startSpan(`receive ${queue}`, {
      kind: SpanKind.CLIENT,
      startTime: startedAtMs,
      attributes: {
        ...attrs,
        [ATTR.operationType]: 'receive',
        [ATTR.batchCount]: got,
        [ATTR.claimBatches]: result.batches.length,
      },
    });
    // Asked before end(): an ended span no longer says whether it recorded.
    const recorded = span.isRecording();
    span.end();
    return recorded ? span.spanContext() : null;
  }

  claimFailed(queue: string, startedAt: number, err: unknown): void {
    this.claimDuration.record(
      (performance.now() - startedAt) / 1000,
      this.queueAttrs.get(queue, errorType(err)),
    );
  }

  /** Starts the `process <kind>` span of an attempt: a child of the context the job was enqueued in (when it
   * carries one), linked to the claim that took it. */
  startProcess(queue: string, job: ClaimedJob, claim: SpanContext | null): ProcessScope {
    const parent = creationContext(job.meta?.trace);
    const links: Link[] | undefined = claim ? [{ context: claim }] : undefined;
    const span = this.scope.tracer.startSpan(
      `process ${job.kind}`,
      { kind: SpanKind.CONSUMER, attributes: this.spanAttrs.get(queue, job.kind), links },
      parent,
    );
    if (span.isRecording()) {
      span.setAttribute(ATTR.messageId, job.id);
      span.setAttribute(ATTR.attempt, job.attempt);
    }
    return { span, parent, startedAt: performance.now() };
  }

  endProcess(
    scope: ProcessScope,
    queue: string,
    kind: string,
    outcome: ProcessOutcome,
    thrown: unknown,
  ): void {
    this.processDuration.record(
      (performance.now() - scope.startedAt) / 1000,
      this.processAttrs.get(queue, kind, outcome),
    );
    const span = scope.span;
    if (span.isRecording()) {
      span.setAttribute(ATTR.outcome, outcome);
      if (outcome === 'retry' || outcome === 'failed') {
        const type = errorType(thrown);
        span.setAttribute(ATTR.errorType, type);
        let message = type;
        try {
          if (thrown instanceof Error) {
            span.recordException(thrown);
            message = String(thrown.message);
          }
        } catch {
          // What the handler threw cannot be read (the attempt failed as an UnreadableThrow): its type says so.
        }
        span.setStatus({ code: SpanStatusCode.ERROR, message });
      }
    }
    span.end();
  }

  /** A settle flush answered: one add per run of equal (queue, kind, outcome, accepted). */
  flushed(items: readonly HostSettlement[], accepted: ReadonlySet<string>): void {
    let run = 0;
    for (let i = 0; i < items.length; i++) {
      const s = items[i]!;
      const ok = accepted.has(s.jobId);
      run++;
      const next = items[i + 1];
      if (
        next &&
        next.queue === s.queue &&
        next.kind === s.kind &&
        next.outcome === s.outcome &&
        accepted.has(next.jobId) === ok
      )
        continue;
      if (!ok) this.staleCounter.add(run, this.jobAttrs.get(s.queue, s.kind));
      else {
        this.settledCounter.add(run, this.jobAttrs.get(s.queue, s.kind, s.outcome));
        if (s.outcome === 'failed' && this.dlqQueues.has(s.queue))
          this.dlqMoved.add(run, this.jobAttrs.get(s.queue, s.kind));
      }
      run = 0;
    }
  }

  /** One settle_attempts() call answered or failed. */
  flushTook(seconds: number): void {
    this.flushDuration.record(seconds);
  }

  /** Results the fence rejected before they were queued (the attempt was closed elsewhere). */
  closedElsewhere(queue: string, kind: string): void {
    this.staleCounter.add(1, this.jobAttrs.get(queue, kind));
  }

  registeredCallback(queue: string, kind: string): void {
    this.callbackRegistered.add(1, this.jobAttrs.get(queue, kind));
  }

  waitTimedOut(): void {
    this.callbackTimedOut.add(1, { [ATTR.callbackWait]: 'handler' });
  }
}
