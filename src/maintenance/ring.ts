import type { MaintenanceStore, PruneResult } from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { measured, type MaintenanceService } from './service.js';

// The ring's turn: rotate (open the next slot when the current one is full or old), prune (truncate the
// oldest slot once nothing in it is live), then tally the sealed slots whose receipts have all settled.

/** Prune and tally try their locks and give up at once: another tick comes soon. */
const RING_LOCK_TIMEOUT_MS = 10;

export interface RingSettings {
  intervalMs: number;
  slotMinRows: number;
  slotMaxAgeMs: number;
  carryLimit: number;
  carryAfterSlots: number;
}

export function ringService(
  store: MaintenanceStore,
  ring: RingSettings,
  telemetry: MaintenanceTelemetry,
  onPrune: (result: PruneResult) => void,
): MaintenanceService {
  return {
    name: 'ring',
    intervalMs: ring.intervalMs,
    async run(db, leading) {
      const rotateClock = telemetry.start();
      const slot = await measured(telemetry, 'rotate', rotateClock, () =>
        store.rotate(db, { minRows: ring.slotMinRows, maxAgeMs: ring.slotMaxAgeMs }),
      );
      telemetry.rotated(rotateClock, slot);
      if (!leading()) return;
      const pruneClock = telemetry.start();
      const result = await measured(telemetry, 'prune', pruneClock, () =>
        store.prune(db, {
          lockTimeoutMs: RING_LOCK_TIMEOUT_MS,
          carryLimit: ring.carryLimit,
          carryAfterSlots: ring.carryAfterSlots,
        }),
      );
      telemetry.pruned(pruneClock, result);
      onPrune(result);
      if (!leading()) return;
      const tallyClock = telemetry.start();
      const tallied = await measured(telemetry, 'tally', tallyClock, () =>
        store.tallySlots(db, RING_LOCK_TIMEOUT_MS),
      );
      telemetry.tallied(tallyClock, tallied);
    },
  };
}
