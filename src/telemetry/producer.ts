import {
  context,
  SpanKind,
  SpanStatusCode,
  type Attributes,
  type Context,
  type Counter,
  type Histogram,
  type Span,
} from '@opentelemetry/api';
import type { JobRow } from '../model/enqueue-options.js';
import type { CallbackAction, CallbackDelivery } from '../storage/index.js';
import { AttributeCache } from './attribute-cache.js';
import { ATTR, DURATION_BUCKETS, METRIC, SYSTEM } from './names.js';
import type { TelemetryScope } from './scope.js';
import { runInSpan, traceCarrier, withTraceMeta } from './trace-context.js';

// What a client (producer and operator handle) records: jobs sent, the duration of each send, a `send` span
// per call that carries its context into the jobs, external callbacks delivered, DLQ operator actions.

export type SendOperation = 'enqueue' | 'enqueueMany' | 'enqueueFlow' | 'copyEnqueue';

export class ProducerTelemetry {
  private readonly sentCounter: Counter;
  private readonly duplicateCounter: Counter;
  private readonly duration: Histogram;
  private readonly callbacks: Counter;
  private readonly dlqRetried: Counter;
  private readonly dlqPurged: Counter;
  private readonly sentAttrs = new AttributeCache((queue, kind) => ({
    [ATTR.system]: SYSTEM,
    [ATTR.operationName]: 'send',
    [ATTR.queue]: queue,
    [ATTR.kind]: kind,
  }));
  private readonly opAttrs = new AttributeCache((op, queue, error) => ({
    [ATTR.system]: SYSTEM,
    [ATTR.operationName]: 'send',
    [ATTR.enqueueOp]: op,
    ...(queue ? { [ATTR.queue]: queue } : {}),
    ...(error ? { [ATTR.errorType]: error } : {}),
  }));

  constructor(private readonly scope: TelemetryScope) {
    const m = scope.meter;
    this.sentCounter = m.createCounter(METRIC.sent, {
      description:
        "Jobs written by enqueue calls, duplicates of unique jobs included (in the caller's transaction, if any: a rollback does not uncount them)",
      unit: '{message}',
    });
    this.duplicateCounter = m.createCounter(METRIC.duplicates, {
      description: 'Unique jobs not inserted because another job holds their key',
      unit: '{message}',
    });
    this.duration = m.createHistogram(METRIC.sendDuration, {
      description: 'Duration of one enqueue call (one statement or one COPY load)',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.callbacks = m.createCounter(METRIC.callbackDelivered, {
      description: 'External callbacks delivered through a client, by action and result',
      unit: '{callback}',
    });
    this.dlqRetried = m.createCounter(METRIC.dlqRetried, {
      description: 'DLQ entries moved back to their queue by an operator',
      unit: '{message}',
    });
    this.dlqPurged = m.createCounter(METRIC.dlqPurged, {
      description: 'DLQ entries deleted by an operator',
      unit: '{message}',
    });
  }

  /** Starts the `send` span of one call; `queue` when all its jobs go to one queue. */
  begin(op: SendOperation, queue: string | null): SendScope {
    return new SendScope(this, op, queue);
  }

  /** @internal SendScope's access to the instruments. */
  startSpan(op: SendOperation, queue: string | null): Span {
    const attributes: Attributes = {
      [ATTR.system]: SYSTEM,
      [ATTR.operationName]: 'send',
      [ATTR.operationType]: 'send',
      [ATTR.enqueueOp]: op,
    };
    if (queue) attributes[ATTR.queue] = queue;
    return this.scope.tracer.startSpan(queue ? `send ${queue}` : 'send', {
      kind: SpanKind.PRODUCER,
      attributes,
    });
  }

  /** @internal */
  recordSent(rows: readonly JobRow[], duplicates: number): void {
    // Run-length over (queue, kind): a bulk load of one kind costs one add per chunk.
    let runStart = 0;
    for (let i = 1; i <= rows.length; i++) {
      const prev = rows[i - 1]!;
      const cur = rows[i];
      if (cur && cur.queue === prev.queue && cur.kind === prev.kind) continue;
      this.sentCounter.add(i - runStart, this.sentAttrs.get(prev.queue, prev.kind));
      runStart = i;
    }
    if (duplicates > 0) this.duplicateCounter.add(duplicates, this.opAttrs.get('', '', ''));
  }

  /** @internal */
  recordDuration(op: SendOperation, queue: string | null, seconds: number, error: string | null): void {
    this.duration.record(seconds, this.opAttrs.get(op, queue ?? '', error ?? ''));
  }

  callbackDelivered(action: CallbackAction, delivery: CallbackDelivery): void {
    this.callbacks.add(1, { [ATTR.callbackAction]: action, [ATTR.callbackResult]: delivery.outcome });
  }

  dlqRetriedCount(n: number): void {
    if (n > 0) this.dlqRetried.add(n);
  }

  dlqPurgedCount(n: number): void {
    if (n > 0) this.dlqPurged.add(n);
  }
}

/** One enqueue call: its span, the trace carrier stored with its jobs, and its metrics once it ends. */
export class SendScope {
  private readonly span: Span;
  private readonly active: Context;
  private readonly carrier: string | null;
  private readonly startedAt = performance.now();
  private count = 0;

  constructor(
    private readonly telemetry: ProducerTelemetry,
    private readonly op: SendOperation,
    private readonly queue: string | null,
  ) {
    this.active = context.active();
    this.span = telemetry.startSpan(op, queue);
    this.carrier = traceCarrier(this.active, this.span);
  }

  /** Runs the call with the send span active (a pg instrumentation then nests its queries under it), and
   * ends the span with the call's result. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    let value: T;
    try {
      value = await runInSpan(this.active, this.span, fn);
    } catch (err) {
      this.end(err);
      throw err;
    }
    this.end();
    return value;
  }

  /** Adds the trace carrier to the jobs' meta (when the caller is being traced). */
  inject(rows: JobRow[]): void {
    if (this.carrier === null) return;
    for (const row of rows) row.metaJson = withTraceMeta(row.metaJson, this.carrier);
  }

  /** The rows were written (in the caller's transaction, if any); `duplicates` of them were not inserted. */
  sent(rows: readonly JobRow[], duplicates: number, firstId?: string): void {
    this.count += rows.length;
    this.telemetry.recordSent(rows, duplicates);
    if (firstId !== undefined && this.op === 'enqueue' && this.span.isRecording())
      this.span.setAttribute(ATTR.messageId, firstId);
  }

  private end(err?: unknown): void {
    const error = err === undefined ? null : errorType(err);
    this.telemetry.recordDuration(this.op, this.queue, (performance.now() - this.startedAt) / 1000, error);
    if (!this.span.isRecording()) return this.span.end();
    if (this.op !== 'enqueue') this.span.setAttribute(ATTR.batchCount, this.count);
    if (error !== null) {
      this.span.setAttribute(ATTR.errorType, error);
      if (err instanceof Error) this.span.recordException(err);
      this.span.setStatus({
        code: SpanStatusCode.ERROR,
        message: err instanceof Error ? err.message : error,
      });
    }
    this.span.end();
  }
}

/** A low-cardinality name for an error: its code (AwaError, pg) or its class name. Never throws: a value
 * whose properties cannot be read (a getter or proxy trap that throws) is an UnreadableThrow. */
export function errorType(err: unknown): string {
  try {
    const code = (err as { code?: unknown } | null)?.code;
    if (typeof code === 'string' && code.length > 0 && code.length <= 40) return code;
    return err instanceof Error ? String(err.name) : typeof err;
  } catch {
    return 'UnreadableThrow';
  }
}
