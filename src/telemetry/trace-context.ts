import { context, propagation, ROOT_CONTEXT, trace, type Context, type Span } from '@opentelemetry/api';

// Trace context in a job's meta: the producer's send span is injected (W3C traceparent, and whatever else
// the registered propagator writes) under meta.trace, next to metadata/tags/unique, which users never write
// directly. It rides along unchanged through retries, snoozes and promotion, and the consumer extracts it
// to parent the execution span.

/** The meta key holding the propagation carrier. */
export const TRACE_META_KEY = 'trace';

/**
 * The carrier to store with the jobs of a send, as a JSON text, or null. Only when the caller has an active
 * span: a producer that is not being traced gets no meta written (and no per-row cost).
 */
export function traceCarrier(active: Context, send: Span): string | null {
  if (!trace.getSpanContext(active)) return null;
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(active, send), carrier);
  return Object.keys(carrier).length > 0 ? JSON.stringify(carrier) : null;
}

/** A job's meta JSON with the carrier added (meta is either null or a JSON object with at least one key). */
export function withTraceMeta(metaJson: string | null, carrierJson: string): string {
  if (metaJson === null) return `{"${TRACE_META_KEY}":${carrierJson}}`;
  return `${metaJson.slice(0, -1)},"${TRACE_META_KEY}":${carrierJson}}`;
}

/** The context the job was enqueued in, or the root context when it carries none. */
export function creationContext(carrier: Record<string, string> | undefined): Context {
  if (!carrier || typeof carrier !== 'object') return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, carrier);
}

/** Runs fn with `span` active (so spans a handler starts are its children), unless the span records nothing. */
export function runInSpan<T>(parent: Context, span: Span, fn: () => T): T {
  if (!span.isRecording()) return fn();
  return context.with(trace.setSpan(parent, span), fn);
}
