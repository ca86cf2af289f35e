import { context, metrics, propagation, trace, type Attributes } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { MeterProvider, MetricReader, type DataPoint, type Histogram } from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';

// A real OpenTelemetry SDK for telemetry tests: a metric reader collected on demand, spans kept in memory,
// the AsyncLocalStorage context manager and the W3C propagator, as a NodeSDK application would have them.

/** A reader that collects only when the test asks (no timer). */
export class OnDemandReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

export interface TestSdk {
  reader: OnDemandReader;
  spans: InMemorySpanExporter;
  meterProvider: MeterProvider;
  tracerProvider: BasicTracerProvider;
  /** Unregisters everything from the global API and shuts the providers down. */
  shutdown(): Promise<void>;
}

/** Builds the SDK; with `register`, installs it as the global providers (what an application does). */
export function createTestSdk(register: boolean): TestSdk {
  const reader = new OnDemandReader();
  const spans = new InMemorySpanExporter();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  if (register) {
    metrics.setGlobalMeterProvider(meterProvider);
    trace.setGlobalTracerProvider(tracerProvider);
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  }
  return {
    reader,
    spans,
    meterProvider,
    tracerProvider,
    async shutdown() {
      if (register) {
        metrics.disable();
        trace.disable();
        context.disable();
        propagation.disable();
      }
      await meterProvider.shutdown();
      await tracerProvider.shutdown();
    },
  };
}

/** The data points of one metric of the `awa` scope (none when it was never recorded). */
export async function points(reader: MetricReader, name: string): Promise<DataPoint<unknown>[]> {
  const { resourceMetrics, errors } = await reader.collect();
  if (errors.length > 0) throw new AggregateError(errors, 'metric collection failed');
  const out: DataPoint<unknown>[] = [];
  for (const scope of resourceMetrics.scopeMetrics) {
    if (scope.scope.name !== 'awa') continue;
    for (const m of scope.metrics) if (m.descriptor.name === name) out.push(...m.dataPoints);
  }
  return out;
}

/** Every metric name of the `awa` scope that has at least one data point. */
export async function recordedNames(reader: MetricReader): Promise<string[]> {
  const { resourceMetrics } = await reader.collect();
  return resourceMetrics.scopeMetrics
    .filter((s) => s.scope.name === 'awa')
    .flatMap((s) => s.metrics.filter((m) => m.dataPoints.length > 0).map((m) => m.descriptor.name));
}

function matches(attributes: Attributes, want: Attributes): boolean {
  return Object.entries(want).every(([k, v]) => attributes[k] === v);
}

/** Sum of a counter's (or gauge's) points whose attributes include `want`. */
export async function sum(reader: MetricReader, name: string, want: Attributes = {}): Promise<number> {
  let total = 0;
  for (const p of await points(reader, name)) if (matches(p.attributes, want)) total += p.value as number;
  return total;
}

/** Number of values a histogram recorded for the points whose attributes include `want`. */
export async function histogramCount(
  reader: MetricReader,
  name: string,
  want: Attributes = {},
): Promise<number> {
  let total = 0;
  for (const p of await points(reader, name))
    if (matches(p.attributes, want)) total += (p.value as Histogram).count;
  return total;
}

export function spansNamed(exporter: InMemorySpanExporter, name: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((s) => s.name === name);
}
