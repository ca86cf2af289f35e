import type pg from 'pg';
import type { MaintenanceStep, MaintenanceTelemetry, StepClock } from '../telemetry/index.js';

// What the elector runs while this host leads: a list of services, each on its own tick, one statement at a
// time on the leader's connection.

export interface MaintenanceService {
  /** What the service is, for logs and tests (its telemetry names its steps itself). */
  readonly name: string;
  readonly intervalMs: number;
  /**
   * One pass on the leader's connection. `leading()` turns false the moment leadership is lost: a pass of
   * several statements checks it between them. May answer how soon (ms) it wants to run again: sooner than
   * its interval, never later.
   */
  run(db: pg.ClientBase, leading: () => boolean): Promise<number | null | void>;
}

/** Runs one step, recording its failure with the step's name (the elector reports the error itself). */
export async function measured<T>(
  telemetry: MaintenanceTelemetry,
  step: MaintenanceStep,
  clock: StepClock,
  run: () => Promise<T>,
): Promise<T> {
  try {
    return await run();
  } catch (err) {
    telemetry.failed(step, clock, err);
    throw err;
  }
}
