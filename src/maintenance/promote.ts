import type { MaintenanceStore } from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { measured, type MaintenanceService } from './service.js';

// Promotion: scheduled and retryable jobs whose time has come move to their queue's available lanes. Each pass
// first resolves the dependencies of flows on jobs outside them that have ended (a flow's dependents released
// that way are then due, and promoted in the same pass).

const PROMOTE_BATCH = 4096;
/** Dependencies on outside jobs resolved per pass (rare: only edges by job id on jobs outside the flow). */
const EXTERNAL_DEPENDENCIES_BATCH = 1000;
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
        await store.resolveExternalDependencies(db, EXTERNAL_DEPENDENCIES_BATCH);
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
