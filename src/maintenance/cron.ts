import { cronUnique } from '../model/cron.js';
import { dueFires, nextOccurrence } from '../model/cron-schedule.js';
import { AwaError } from '../model/errors.js';
import {
  isConnectionLoss,
  type CronFireOutcome,
  type MaintenanceStore,
  type Queryable,
} from '../storage/index.js';
import type { MaintenanceTelemetry } from '../telemetry/index.js';
import { measured, type MaintenanceService } from './service.js';

// The leader's cron evaluation. The rule of what is due is model/cron-schedule.ts's dueFires(); the SQL of a
// fire is cron_fire(), one transaction per fire.

/** One occurrence the leader acted on (or tried to). */
export interface CronFire {
  name: string;
  fireAt: Date;
  /** fired: job enqueued; skipped: late under missedFire 'skip', recorded without a job; duplicate: the
   * unique key is held (jobId is the holder); busy/paused/changed/stale/lanes_busy: nothing written, the
   * schedule is evaluated again next tick (see cron_fire()). */
  outcome: CronFireOutcome;
  jobId: string | null;
}

/**
 * The maintenance leader's cron tick. Reads the schedules that are not paused and the database's clock, and
 * for each computes the occurrences to act on (dueFires(): the on-time ones, or the latest missed one per its
 * missedFire policy), then fires each (or records it as skipped) with one cron_fire() call: one transaction
 * per occurrence, on the leader's own connection.
 */
export class CronEvaluator {
  /** Schedules whose stored definition could not be evaluated, by name → hash, reported once per hash. */
  private readonly broken = new Map<string, string>();
  /** Per schedule, its next occurrence after what it has handled (valid for that hash and handled-to): cron
   * arithmetic in a time zone costs a few hundred microseconds, so a schedule is only evaluated when due. */
  private readonly upcoming = new Map<string, { hash: string; handledTo: number; next: number }>();

  constructor(
    private readonly store: MaintenanceStore,
    /** An occurrence not fired within this long of its time is missed (see dueFires()). */
    private readonly missedAfterMs: number,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** One evaluation pass. `now` overrides the database's clock (tests). */
  async tick(db: Queryable, now?: Date): Promise<CronFire[]> {
    const pending = await this.store.cronPending(db);
    const at = now ?? pending.now;
    const fires: CronFire[] = [];
    const names = new Set(pending.schedules.map((s) => s.name));
    for (const name of this.upcoming.keys()) if (!names.has(name)) this.upcoming.delete(name);
    for (const s of pending.schedules) {
      const handledTo = s.handledTo.getTime();
      const known = this.upcoming.get(s.name);
      if (known && known.hash === s.hash && known.handledTo === handledTo && known.next > at.getTime())
        continue;
      let actions;
      try {
        actions = dueFires(s, s.handledTo, at, this.missedAfterMs);
        if (actions.length === 0) {
          const next = nextOccurrence(s, s.handledTo);
          this.upcoming.set(s.name, { hash: s.hash, handledTo, next: next?.getTime() ?? Infinity });
        }
      } catch (err) {
        if (this.broken.get(s.name) !== s.hash) {
          this.broken.set(s.name, s.hash);
          this.onError(
            new AwaError(
              'AWA_INVALID_OPTION',
              `cron schedule "${s.name}" (${JSON.stringify(s.cron)} in ${s.timezone}) cannot be evaluated: ${(err as Error).message}`,
            ),
          );
        }
        continue;
      }
      for (const a of actions) {
        const enqueue = a.action === 'fire';
        const unique = enqueue
          ? cronUnique(s.uniqueSpec, s.kind, s.queue, s.argsJson, a.fireAt.getTime())
          : null;
        let r;
        try {
          r = await this.store.cronFire(db, {
            name: s.name,
            fireAt: a.fireAt,
            hash: s.hash,
            enqueue,
            unique,
          });
        } catch (err) {
          // One schedule's failure (a lock timeout on its unique key, say) does not hold up the others; a lost
          // connection ends the pass.
          if (isConnectionLoss(err)) throw err;
          this.onError(err);
          break;
        }
        fires.push({ name: s.name, fireAt: a.fireAt, ...r });
        // Anything but a write (busy, paused, changed, stale…) ends this schedule's pass: a later occurrence
        // must not be handled before this one.
        if (r.outcome !== 'fired' && r.outcome !== 'skipped' && r.outcome !== 'duplicate') break;
      }
    }
    return fires;
  }
}

/** Fires the due occurrences of cron schedules (one transaction each, on the leader's connection). */
export function cronService(
  store: MaintenanceStore,
  intervalMs: number,
  missedAfterMs: number,
  telemetry: MaintenanceTelemetry,
  events: { onCron?(fires: CronFire[]): void; onError(err: unknown): void },
): MaintenanceService {
  const evaluator = new CronEvaluator(store, missedAfterMs, (err) => events.onError(err));
  return {
    name: 'cron',
    intervalMs,
    async run(db) {
      const clock = telemetry.start();
      const fires = await measured(telemetry, 'cron', clock, () => evaluator.tick(db));
      telemetry.cronEvaluated(clock, fires.filter((f) => f.outcome === 'fired').length);
      if (fires.length > 0) events.onCron?.(fires);
    },
  };
}
