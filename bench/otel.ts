import { context, metrics, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core';
import {
  AggregationTemporality,
  MeterProvider,
  PeriodicExportingMetricReader,
  type PushMetricExporter,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';

// `--otel sdk`: the OpenTelemetry SDK registered as an application would (metrics collected on a timer,
// every span batched and exported, AsyncLocalStorage context, W3C propagation), with exporters that drop
// what they get. The row then prices Awa's instrumentation plus the SDK's own work, not a network exporter.
// Without it (`--otel none`) only the API is loaded and every instrument is a no-op.

/** How often the metric reader collects (observable gauges run then, queue health included). */
const METRIC_INTERVAL_MS = 5_000;

class DiscardingMetricExporter implements PushMetricExporter {
  export(_metrics: unknown, done: (result: ExportResult) => void): void {
    done({ code: ExportResultCode.SUCCESS });
  }
  selectAggregationTemporality(): AggregationTemporality {
    return AggregationTemporality.CUMULATIVE;
  }
  async forceFlush(): Promise<void> {}
  async shutdown(): Promise<void> {}
}

class DiscardingSpanExporter implements SpanExporter {
  export(_spans: unknown, done: (result: ExportResult) => void): void {
    done({ code: ExportResultCode.SUCCESS });
  }
  async shutdown(): Promise<void> {}
}

/** Registers the SDK globally; the returned function unregisters it and shuts it down. sample: the fraction
 * of root traces recorded (`--otel-sample`); below 1 the sampler is ParentBased(TraceIdRatioBased), as
 * tracing at volume is usually run, and unsampled spans cost the SDK almost nothing. */
export function installOtelSdk(sample = 1): () => Promise<void> {
  const meterProvider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new DiscardingMetricExporter(),
        exportIntervalMillis: METRIC_INTERVAL_MS,
      }),
    ],
  });
  const tracerProvider = new BasicTracerProvider({
    ...(sample < 1
      ? { sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(sample) }) }
      : {}),
    spanProcessors: [new BatchSpanProcessor(new DiscardingSpanExporter())],
  });
  metrics.setGlobalMeterProvider(meterProvider);
  trace.setGlobalTracerProvider(tracerProvider);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  return async () => {
    metrics.disable();
    trace.disable();
    context.disable();
    propagation.disable();
    await Promise.all([meterProvider.shutdown(), tracerProvider.shutdown()]);
  };
}
