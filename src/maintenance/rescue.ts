import type { MaintenanceStore, RescuedAttempt } from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { measured, type MaintenanceService } from './service.js';

// Rescue: attempts nobody will settle (their host went silent or stopped, or they passed their deadline) and
// parked jobs whose callback timed out go back to their queue, to retry or to fail.

const RESCUE_MAX_BATCHES = 256;
const CALLBACK_EXPIRY_BATCH = 1_000;

export function rescueService(
  store: MaintenanceStore,
  intervalMs: number,
  heartbeatStalenessMs: number,
  telemetry: MaintenanceTelemetry,
  onRescue: (rescued: RescuedAttempt[]) => void,
): MaintenanceService {
  return {
    name: 'rescue',
    intervalMs,
    async run(db) {
      const clock = telemetry.start();
      const rescued = await measured(telemetry, 'rescue', clock, () =>
        store.rescue(db, {
          stalenessSeconds: heartbeatStalenessMs / 1000,
          maxBatches: RESCUE_MAX_BATCHES,
        }),
      );
      if (rescued.length > 0) onRescue(rescued);
      telemetry.rescued(clock, rescued, []);
    },
  };
}

/** Parked jobs whose callback timed out. Answers how long until the next timeout is due, so the leader wakes
 * at that deadline rather than at its next look (null: none is parked with a timeout). */
export function callbackTimeoutService(
  store: MaintenanceStore,
  intervalMs: number,
  telemetry: MaintenanceTelemetry,
): MaintenanceService {
  return {
    name: 'callback-timeouts',
    intervalMs,
    async run(db, leading) {
      const clock = telemetry.start();
      const expired = await measured(telemetry, 'rescue', clock, () =>
        store.expireCallbacks(db, CALLBACK_EXPIRY_BATCH),
      );
      telemetry.rescued(clock, [], expired);
      if (expired.length === CALLBACK_EXPIRY_BATCH) return 0;
      if (!leading()) return null;
      const ms = await store.nextCallbackTimeoutMs(db);
      // One millisecond past the deadline: expiry takes jobs whose timeout is strictly before now().
      return ms === null ? null : ms + 1;
    },
  };
}
