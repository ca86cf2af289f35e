import { metrics, trace, type Meter, type Tracer } from '@opentelemetry/api';
import { AWA_VERSION } from '../model/descriptor.js';
import { SCOPE } from './names.js';

// The meter and tracer of one host or client, taken from the global API once, when it is built. Without a
// registered SDK both are the API's no-ops. The global MeterProvider is read here only: register the SDK
// before creating hosts and clients (the tracer is a proxy and would follow a later registration; the
// meter would not).

export interface TelemetryScope {
  meter: Meter;
  tracer: Tracer;
}

export function telemetryScope(): TelemetryScope {
  return { meter: metrics.getMeter(SCOPE, AWA_VERSION), tracer: trace.getTracer(SCOPE, AWA_VERSION) };
}
