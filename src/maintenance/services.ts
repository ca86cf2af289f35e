import type { MaintenanceStore, PruneResult, RescuedAttempt } from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { cleanupService, type RetentionSettings } from './cleanup.js';
import { cronService, type CronFire } from './cron.js';
import { promoteService } from './promote.js';
import { callbackTimeoutService, rescueService } from './rescue.js';
import { ringService, type RingSettings } from './ring.js';
import type { MaintenanceService } from './service.js';

// Every maintenance service, in one list: what the elected host runs. A new service is one file and one line
// here.

export interface MaintenanceSettings extends RetentionSettings {
  promoteIntervalMs: number;
  ring: RingSettings;
  rescueIntervalMs: number;
  heartbeatStalenessMs: number;
  /** The longest the leader goes without looking for the next callback timeout (it wakes at one it knows). */
  callbackTimeoutIntervalMs: number;
  /** Cron evaluation tick; an occurrence not fired within cronMissedAfterMs of its time is missed. */
  cronIntervalMs: number;
  cronMissedAfterMs: number;
}

export interface MaintenanceEvents {
  onPrune(result: PruneResult): void;
  onRescue(rescued: RescuedAttempt[]): void;
  onCron?(fires: CronFire[]): void;
  onError(err: unknown): void;
}

export function maintenanceServices(
  store: MaintenanceStore,
  s: MaintenanceSettings,
  events: MaintenanceEvents,
  telemetry: MaintenanceTelemetry,
): MaintenanceService[] {
  return [
    promoteService(store, s.promoteIntervalMs, telemetry),
    ringService(store, s.ring, telemetry, (r) => events.onPrune(r)),
    rescueService(store, s.rescueIntervalMs, s.heartbeatStalenessMs, telemetry, (r) => events.onRescue(r)),
    callbackTimeoutService(store, s.callbackTimeoutIntervalMs, telemetry),
    cleanupService(store, s, telemetry),
    cronService(store, s.cronIntervalMs, s.cronMissedAfterMs, telemetry, events),
  ];
}
