import { Cron } from 'croner';
import { InvalidOptionError } from './errors.js';
import { describe } from './validation.js';

// Cron arithmetic, delegated to croner: parsing a cron expression in an IANA time zone, and finding its
// occurrences. Everything here is a pure function of its inputs (no clock is read), so the due-time rule the
// maintenance leader applies can be tested with literal instants.
//
// Occurrences in a DST transition follow croner's rules: an expression whose second, minute and hour fields
// are single values (e.g. `30 2 * * *`) is a fixed-time schedule: on the day a local time does not exist
// (spring forward) it fires once, at the first valid time after the gap; on the day a local time repeats
// (fall back) it fires once, at the first of the two. Any other expression (`*/30 * * * *`, `0 * * * *`)
// is an interval schedule: it skips the local times that do not exist and fires on both of a repeated
// time.

/** What to do about occurrences that fell due while no leader was evaluating (downtime). */
export type MissedFire = 'latest' | 'skip';

export interface CronSpec {
  /** The cron expression. */
  cron: string;
  timezone: string;
}

/** One occurrence to act on: fire it (enqueue its job), or record it as skipped (handled, no job). */
export interface CronAction {
  action: 'fire' | 'skip';
  fireAt: Date;
}

/** At most this many on-time occurrences of one schedule are returned per evaluation; the rest wait for the
 * next one. */
export const MAX_FIRES_PER_EVALUATION = 1_000;

const cache = new Map<string, Cron>();
const CACHE_LIMIT = 1_000;

/**
 * Validates an IANA time zone name ("Europe/Berlin", "UTC"); `field` names the option in the error. Returns
 * the name as given.
 */
export function validateTimezone(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 100) {
    throw new InvalidOptionError(
      field,
      `must be an IANA time zone name such as "Europe/Berlin" or "UTC", got ${describe(value)}`,
    );
  }
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: value });
  } catch {
    throw new InvalidOptionError(
      field,
      `is not a time zone this runtime knows: ${JSON.stringify(value)} (use an IANA name such as "Europe/Berlin", "America/New_York" or "UTC")`,
    );
  }
  return value;
}

/**
 * Validates a cron expression (5 fields: minute hour day-of-month month day-of-week; 6 with seconds first;
 * 7 with a year last; or a nickname such as @daily) in a time zone. The expression must have at least one
 * occurrence after `now`. `field` names the option in the error.
 */
export function validateCronExpression(field: string, value: unknown, timezone: string, now: Date): string {
  if (typeof value !== 'string' || value.trim().length === 0 || value.length > 200) {
    throw new InvalidOptionError(
      field,
      `must be a cron expression such as "30 2 * * *" (minute hour day month weekday), got ${describe(value)}`,
    );
  }
  let cron: Cron;
  try {
    cron = schedule({ cron: value, timezone });
  } catch (err) {
    throw new InvalidOptionError(field, `${JSON.stringify(value)} is not valid: ${(err as Error).message}`);
  }
  if (cron.nextRun(now) === null) {
    throw new InvalidOptionError(field, `${JSON.stringify(value)} never fires after ${now.toISOString()}`);
  }
  return value;
}

/** The first occurrence strictly after `after`, or null when there is none. */
export function nextOccurrence(spec: CronSpec, after: Date): Date | null {
  return schedule(spec).nextRun(after);
}

/** The latest occurrence at or before `at`, or null when there is none. */
export function latestOccurrence(spec: CronSpec, at: Date): Date | null {
  // croner's previousRuns looks strictly before its reference; occurrences are whole seconds.
  return schedule(spec).previousRuns(1, new Date(at.getTime() + 1))[0] ?? null;
}

/**
 * The due-time rule the maintenance leader applies to a schedule at `now`, pure and exact. `from` is the
 * instant the schedule has been handled up to: its last fire time (fired or skipped), or when it was created
 * or last resumed, whichever is latest. The occurrences due are those strictly after `from` and at or before
 * `now`. One is **on time** if `now` is at most `missedAfterMs` past it, **missed** otherwise (no leader
 * evaluated the schedule within that long of its time: downtime, or a failover slower than that).
 *   - Every on-time occurrence fires, each once, oldest first (a tick that comes late, or a short failover,
 *     loses nothing). Missed occurrences before them are then dropped, whatever the policy.
 *   - With no on-time occurrence due, the latest missed one is acted on once: missedFire 'latest' fires it;
 *     'skip' records it as skipped, and the schedule fires again at its next occurrence on time. Earlier
 *     missed occurrences are dropped.
 * Returns the actions in order (empty when nothing is due).
 */
export function dueFires(
  spec: CronSpec & { missedFire: MissedFire },
  from: Date,
  now: Date,
  missedAfterMs: number,
): CronAction[] {
  const fromMs = from.getTime();
  const nowMs = now.getTime();
  const onTimeFrom = nowMs - missedAfterMs;
  const actions: CronAction[] = [];
  // On-time occurrences: in [now - missedAfterMs, now] and after `from`.
  let cursor = new Date(Math.max(fromMs, onTimeFrom - 1));
  while (actions.length < MAX_FIRES_PER_EVALUATION) {
    const next = nextOccurrence(spec, cursor);
    if (next === null || next.getTime() > nowMs) break;
    actions.push({ action: 'fire', fireAt: next });
    cursor = next;
  }
  if (actions.length > 0) return actions;
  const missed = latestOccurrence(spec, new Date(onTimeFrom - 1));
  if (missed === null || missed.getTime() <= fromMs) return [];
  return [{ action: spec.missedFire === 'latest' ? 'fire' : 'skip', fireAt: missed }];
}

function schedule(spec: CronSpec): Cron {
  const key = `${spec.timezone}\u0000${spec.cron}`;
  let cron = cache.get(key);
  if (!cron) {
    // domAndDow false: a day-of-month and a day-of-week restriction combine with OR, as in classic cron.
    cron = new Cron(spec.cron, { timezone: spec.timezone, domAndDow: false });
    if (cache.size >= CACHE_LIMIT) cache.clear();
    cache.set(key, cron);
  }
  return cron;
}
