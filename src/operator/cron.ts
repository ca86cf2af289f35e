import type { Actor } from '../model/audit.js';
import { cronUnique } from '../model/cron.js';
import { nextOccurrence, type MissedFire } from '../model/cron-schedule.js';
import { AwaError, InvalidOptionError } from '../model/errors.js';
import { validateName } from '../model/validation.js';
import type { Audited, CronRecord, Queryable, Storage } from '../storage/index.js';

// The operator's reads and commands on cron schedules (AwaClient.listCron and the rest, `awa cron`).

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
  store: Storage,
  stalenessMs: number,
): Promise<CronSchedule[]> {
  const { now, schedules } = await store.reads.cronList(db, stalenessMs / 1000);
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
    cron: r.cron,
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
  store: Storage,
  name: string,
  paused: boolean,
  by: Actor,
): Promise<Audited<boolean>> {
  validateName('name', name);
  const { value: r, record } = await store.actions.cronSetPaused(db, name, paused, by);
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
  store: Storage,
  name: string,
  by: Actor,
): Promise<Audited<CronTriggerResult>> {
  validateName('name', name);
  // The definition may change between the read and the trigger (a host syncing a new version): read again.
  for (let i = 0; i < 3; i++) {
    const { schedules } = await store.reads.cronList(db, 30);
    const r = schedules.find((s) => s.name === name);
    if (!r) throw unknownSchedule(name);
    const u = r.meta?.unique as { key?: string; states: string[]; periodMs?: number } | undefined;
    const unique = cronUnique(u, r.kind, r.queue, JSON.stringify(r.args), Date.now());
    const { value: t, record } = await store.actions.cronTrigger(db, name, r.hash, unique, by);
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
  store: Storage,
  name: string,
  by: Actor,
): Promise<Audited<boolean>> {
  validateName('name', name);
  return store.actions.cronRemove(db, name, by);
}

function unknownSchedule(name: string): InvalidOptionError {
  return new InvalidOptionError(
    'name',
    `no cron schedule is named ${JSON.stringify(name)} (see \`awa cron list\`)`,
  );
}
