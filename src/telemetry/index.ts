// Telemetry through @opentelemetry/api only: see docs/telemetry.md for every metric and span.
export { telemetryScope, type TelemetryScope } from './scope.js';
export { ProducerTelemetry, SendScope, errorType, type SendOperation } from './producer.js';
export {
  ConsumerTelemetry,
  type HostSettlement,
  type ProcessOutcome,
  type ProcessScope,
} from './consumer.js';
export { MaintenanceTelemetry, type MaintenanceStep, type StepClock } from './maintenance.js';
export { HostGauges, QUEUE_HEALTH_MAX_AGE_MS, type GaugeSources } from './gauges.js';
export { runInSpan, TRACE_META_KEY } from './trace-context.js';
export { ATTR, METRIC, SCOPE } from './names.js';
