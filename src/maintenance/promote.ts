import type { MaintenanceStore } from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { measured, type MaintenanceService } from './service.js';

// Promotion: scheduled and retryable jobs whose time has come move to their queue's available lanes.

const PROMOTE_BATCH = 4096;
/** Full batches per pass: a bounded pass keeps one service from monopolising the leader's connection. */
const PROMOTE_BATCHES = 8;

export function promoteService(
  store: MaintenanceStore,
  intervalMs: number,
  telemetry: MaintenanceTelemetry,
): MaintenanceService {
  return {
    name: 'promote',
    intervalMs,
    async run(db, leading) {
      const clock = telemetry.start();
      let total = 0;
      await measured(telemetry, 'promote', clock, async () => {
        for (let i = 0; i < PROMOTE_BATCHES && leading(); i++) {
          const n = await store.promoteDue(db, PROMOTE_BATCH);
          total += n;
          if (n < PROMOTE_BATCH) break;
        }
      });
      telemetry.promoted(clock, total);
    },
  };
}
