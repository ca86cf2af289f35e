// The names Awa records under: one place, so docs/telemetry.md, the Grafana dashboard and the code agree.
// Messaging metrics and attributes follow the OpenTelemetry messaging semantic conventions where one fits
// (a queue is a destination, a job a message); the rest are `awa.*`.

/** The instrumentation scope (meter and tracer name). */
export const SCOPE = 'awa';

/** Value of messaging.system on every messaging metric and span. */
export const SYSTEM = 'awa';

export const ATTR = {
  system: 'messaging.system',
  queue: 'messaging.destination.name',
  operationName: 'messaging.operation.name',
  operationType: 'messaging.operation.type',
  messageId: 'messaging.message.id',
  batchCount: 'messaging.batch.message_count',
  errorType: 'error.type',
  kind: 'awa.job.kind',
  outcome: 'awa.job.outcome',
  attempt: 'awa.job.attempt',
  state: 'awa.job.state',
  claimBatches: 'awa.claim.batches',
  rescueReason: 'awa.rescue.reason',
  pruneOutcome: 'awa.prune.outcome',
  ringSlot: 'awa.ring.slot',
  step: 'awa.maintenance.step',
  callbackAction: 'awa.callback.action',
  callbackResult: 'awa.callback.result',
  callbackWait: 'awa.callback.wait',
  enqueueOp: 'awa.enqueue.operation',
} as const;

export const METRIC = {
  sent: 'messaging.client.sent.messages',
  sendDuration: 'messaging.client.operation.duration',
  duplicates: 'awa.job.enqueue.duplicates',
  consumed: 'messaging.client.consumed.messages',
  claimBatches: 'awa.claim.batches',
  claimDuration: 'awa.claim.duration',
  processDuration: 'messaging.process.duration',
  settled: 'awa.job.settled',
  stale: 'awa.job.stale',
  dlqMoved: 'awa.dlq.moved',
  dlqRetried: 'awa.dlq.retried',
  dlqPurged: 'awa.dlq.purged',
  flushDuration: 'awa.settle.flush.duration',
  promoted: 'awa.job.promoted',
  rescued: 'awa.job.rescued',
  rotations: 'awa.ring.rotations',
  prunes: 'awa.ring.prunes',
  carried: 'awa.ring.carried',
  cleaned: 'awa.history.cleaned',
  maintenanceDuration: 'awa.maintenance.duration',
  callbackRegistered: 'awa.callback.registered',
  callbackDelivered: 'awa.callback.delivered',
  callbackTimedOut: 'awa.callback.timed_out',
  inFlight: 'awa.worker.in_flight',
  capacity: 'awa.worker.capacity',
  held: 'awa.worker.held',
  backlog: 'awa.settle.backlog',
  leader: 'awa.worker.leader',
  depth: 'awa.queue.depth',
  oldestAge: 'awa.queue.oldest_available.age',
  paused: 'awa.queue.paused',
} as const;

/** Histogram buckets in seconds for job and statement durations: 100 µs to 5 min. */
export const DURATION_BUCKETS = [
  0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
];
