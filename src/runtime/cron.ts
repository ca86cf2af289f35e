import type pg from 'pg';
import type { Actor } from '../model/audit.js';
import { cronRow, cronUnique, type CronDefinition } from '../model/cron.js';
import { dueFires, nextOccurrence, type MissedFire } from '../model/cron-schedule.js';
import { AwaError, InvalidOptionError } from '../model/errors.js';
import { validateName } from '../model/validation.js';
import {
  ensureLanes,
  fireCron,
  isConnectionLoss,
  listCron,
  pendingCron,
  removeCron,
  setCronPaused,
  syncCron,
  triggerCron,
  type Audited,
  type CronFireOutcome,
  type CronRecord,
  type CronSyncAction,
  type Queryable,
  type Schema,
} from '../storage/index.js';

// Cron in the runtime: a host's sync of its declarations at start, the leader's evaluation tick, and the
// operator's reads and commands. The rule of what is due is model/cron-schedule.ts's dueFires(); the SQL of a
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

/** Syncs a host's schedules (even none: the host then declares nothing) and creates their queues' lanes. */
export async function syncCronDefinitions(
  db: pg.ClientBase,
  schema: Schema,
  instanceId: string,
  defs: readonly CronDefinition[],
  stalenessMs: number,
): Promise<{ name: string; action: CronSyncAction }[]> {
  const rows = await Promise.all(defs.map((d) => cronRow(d)));
  await ensureLanes(db, schema, [...new Set(rows.map((r) => r.queue))]);
  return syncCron(db, schema, instanceId, rows, stalenessMs / 1000);
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
    private readonly schema: Schema,
    /** An occurrence not fired within this long of its time is missed (see dueFires()). */
    private readonly missedAfterMs: number,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** One evaluation pass. `now` overrides the database's clock (tests). */
  async tick(db: Queryable, now?: Date): Promise<CronFire[]> {
    const pending = await pendingCron(db, this.schema);
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
              `cron schedule "${s.name}" (${JSON.stringify(s.expression)} in ${s.timezone}) cannot be evaluated: ${(err as Error).message}`,
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
          r = await fireCron(db, this.schema, {
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

/** A schedule as the operator sees it (AwaClient.listCron, `awa cron list`). */
export interface CronSchedule {
  name: string;
  cron: string;
  timezone: string;
  kind: string;
  queue: string;
  priority: number;
  args: unknown;
  maxAttempts: number;
  missedFire: MissedFire;
  paused: boolean;
  pausedAt: Date | null;
  /** The next occurrence the leader will fire (computed with the cron library from the database's clock and
   * what the schedule has handled); null while paused. */
  nextFireAt: Date | null;
  lastFireAt: Date | null;
  lastJobId: string | null;
  declaredBy: string;
  declaredAt: Date;
  createdAt: Date;
  /** No live worker declares this schedule any more (it still fires until removed). */
  undeclared: boolean;
  undeclaredSince: Date | null;
  metadata: Record<string, unknown> | null;
  tags: string[] | null;
}

export async function listCronSchedules(
  db: Queryable,
  schema: Schema,
  stalenessMs: number,
): Promise<CronSchedule[]> {
  const { now, schedules } = await listCron(db, schema, stalenessMs / 1000);
  return schedules.map((r) => toSchedule(r, now));
}

function toSchedule(r: CronRecord, now: Date): CronSchedule {
  const handledTo = Math.max(r.lastFireAt?.getTime() ?? r.createdAt.getTime(), r.resumedAt?.getTime() ?? 0);
  let next: Date | null = null;
  if (!r.pausedAt) {
    try {
      next = nextOccurrence(r, new Date(Math.max(handledTo, now.getTime())));
    } catch {
      next = null; // an expression this build cannot read: the leader reports it
    }
  }
  return {
    name: r.name,
    cron: r.expression,
    timezone: r.timezone,
    kind: r.kind,
    queue: r.queue,
    priority: r.priority,
    args: r.args,
    maxAttempts: r.maxAttempts,
    missedFire: r.missedFire,
    paused: r.pausedAt !== null,
    pausedAt: r.pausedAt,
    nextFireAt: next,
    lastFireAt: r.lastFireAt,
    lastJobId: r.lastJobId,
    declaredBy: r.declaredBy,
    declaredAt: r.declaredAt,
    createdAt: r.createdAt,
    undeclared: r.undeclaredSince !== null,
    undeclaredSince: r.undeclaredSince,
    metadata: r.meta?.metadata ?? null,
    tags: r.meta?.tags ?? null,
  };
}

/** Pauses or resumes a schedule; false when it already was. Unknown names are an error. */
export async function setSchedulePaused(
  db: Queryable,
  schema: Schema,
  name: string,
  paused: boolean,
  by: Actor,
): Promise<Audited<boolean>> {
  validateName('name', name);
  const { value: r, record } = await setCronPaused(db, schema, name, paused, by);
  if (r === 'missing') throw unknownSchedule(name);
  return { value: r !== 'unchanged', record };
}

export interface CronTriggerResult {
  /** The job enqueued, or for a unique schedule whose key is held, the job holding it. */
  id: string;
  inserted: boolean;
}

/** Enqueues one job of the schedule now (meta.cron.manual), outside its fire times. */
export async function triggerSchedule(
  db: Queryable,
  schema: Schema,
  name: string,
  by: Actor,
): Promise<Audited<CronTriggerResult>> {
  validateName('name', name);
  // The definition may change between the read and the trigger (a host syncing a new version): read again.
  for (let i = 0; i < 3; i++) {
    const { schedules } = await listCron(db, schema, 30);
    const r = schedules.find((s) => s.name === name);
    if (!r) throw unknownSchedule(name);
    const u = r.meta?.unique as { key?: string; states: string[]; periodMs?: number } | undefined;
    const unique = cronUnique(u, r.kind, r.queue, JSON.stringify(r.args), Date.now());
    const { value: t, record } = await triggerCron(db, schema, name, r.hash, unique, by);
    if (t.outcome === 'missing') throw unknownSchedule(name);
    if (t.outcome !== 'changed')
      return { value: { id: t.jobId!, inserted: t.outcome === 'triggered' }, record };
  }
  throw new AwaError(
    'AWA_DATABASE_ERROR',
    `cron schedule "${name}" kept changing while being triggered; try again`,
  );
}

export async function removeSchedule(
  db: Queryable,
  schema: Schema,
  name: string,
  by: Actor,
): Promise<Audited<boolean>> {
  validateName('name', name);
  return removeCron(db, schema, name, by);
}

function unknownSchedule(name: string): InvalidOptionError {
  return new InvalidOptionError(
    'name',
    `no cron schedule is named ${JSON.stringify(name)} (see \`awa cron list\`)`,
  );
}
