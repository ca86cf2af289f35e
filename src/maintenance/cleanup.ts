import type { MaintenanceStore } from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { measured, type MaintenanceService } from './service.js';

// History cleanup: failed and cancelled jobs, DLQ entries, compact completed history and audit records past
// their retention, a bounded number per pass.

const CLEANUP_INTERVAL_MS = 60_000;
const CLEANUP_LIMIT = 5_000;

export interface RetentionSettings {
  failedRetentionMs: number;
  dlqRetentionMs: number;
  completedRetentionMs: number;
  auditRetentionMs: number;
}

export function cleanupService(
  store: MaintenanceStore,
  retention: RetentionSettings,
  telemetry: MaintenanceTelemetry,
): MaintenanceService {
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
          limit: CLEANUP_LIMIT,
        }),
      );
      telemetry.cleanedUp(clock, result);
      if (!leading()) return;
      await measured(telemetry, 'cleanup', telemetry.start(), () =>
        store.auditPrune(db, retention.auditRetentionMs / 1000, CLEANUP_LIMIT),
      );
    },
  };
}
