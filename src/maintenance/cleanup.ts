import type { MaintenanceStore } from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { measured, type MaintenanceService } from './service.js';

// History cleanup: failed and cancelled jobs, DLQ entries, compact completed history, stored results (per queue)
// and audit records past their retention, a bounded number per pass; then the durable steps of jobs that are gone,
// and the flows none of whose jobs is left.

const CLEANUP_INTERVAL_MS = 60_000;
const CLEANUP_LIMIT = 5_000;

export interface RetentionSettings {
  failedRetentionMs: number;
  dlqRetentionMs: number;
  completedRetentionMs: number;
  auditRetentionMs: number;
  /** Queues whose stored results are kept for a time of their own (ms); the rest for completedRetentionMs. */
  resultRetentionByQueue?: ReadonlyMap<string, number>;
}

export function cleanupService(
  store: MaintenanceStore,
  retention: RetentionSettings,
  telemetry: MaintenanceTelemetry,
): MaintenanceService {
  // Where the step prune goes on from: it walks job ids in order, so the steps of jobs it keeps (long sleepers)
  // cannot hide those of finished jobs behind them.
  let stepsAfter = '0';
  let flowsAfter = '0';
  /** Flows are looked at in batches this size (each judged by its jobs: fewer per pass than steps). */
  const flowsLimit = 500;
  // No job is gone (past every retention) sooner than the shortest retention: younger steps and flows are not
  // looked at.
  const goneAfterSeconds =
    Math.min(retention.failedRetentionMs, retention.dlqRetentionMs, retention.completedRetentionMs) / 1000;
  return {
    name: 'cleanup',
    intervalMs: CLEANUP_INTERVAL_MS,
    async run(db, leading) {
      const clock = telemetry.start();
      const result = await measured(telemetry, 'cleanup', clock, () =>
        store.cleanup(db, {
          failedRetentionSeconds: retention.failedRetentionMs / 1000,
          dlqRetentionSeconds: retention.dlqRetentionMs / 1000,
          completedRetentionSeconds: retention.completedRetentionMs / 1000,
          resultRetentionByQueue: new Map(
            [...(retention.resultRetentionByQueue ?? [])].map(([queue, ms]) => [queue, ms / 1000]),
          ),
          limit: CLEANUP_LIMIT,
        }),
      );
      telemetry.cleanedUp(clock, result);
      if (!leading()) return;
      await measured(telemetry, 'cleanup', telemetry.start(), () =>
        store.auditPrune(db, retention.auditRetentionMs / 1000, CLEANUP_LIMIT),
      );
      if (!leading()) return;
      const steps = await measured(telemetry, 'cleanup', telemetry.start(), () =>
        store.pruneSteps(db, stepsAfter, CLEANUP_LIMIT, goneAfterSeconds),
      );
      stepsAfter = steps.nextAfter;
      if (!leading()) return;
      const flows = await measured(telemetry, 'cleanup', telemetry.start(), () =>
        store.pruneFlows(db, flowsAfter, flowsLimit, goneAfterSeconds),
      );
      flowsAfter = flows.nextAfter;
    },
  };
}
