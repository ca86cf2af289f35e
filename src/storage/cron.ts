import type { Actor } from '../model/audit.js';
import type { CronRow } from '../model/cron.js';
import type { MissedFire } from '../model/cron-schedule.js';
import { audited, type Audited } from './audit.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Cron schedules (see sql/functions/engine/cron.sql): a host's sync of its declarations, what the leader evaluates,
// the one-transaction fire of a due occurrence, and the operator's list, pause/resume, trigger and remove.
// No cron arithmetic here: callers compute fire times.

export type CronSyncAction = 'created' | 'updated' | 'unchanged';

/** Upserts a host's schedules and records it as their declarer; returns what happened to each. */
export async function syncCron(
  db: Queryable,
  schema: Schema,
  instanceId: string,
  rows: readonly CronRow[],
  stalenessSeconds: number,
): Promise<{ name: string; action: CronSyncAction }[]> {
  // Args and meta are spliced in as JSON text, so the database stores exactly what was validated.
  const defs = `[${rows
    .map(
      (r) =>
        `{"name":${JSON.stringify(r.name)},"cron":${JSON.stringify(r.cron)},"timezone":${JSON.stringify(r.timezone)},` +
        `"kind":${JSON.stringify(r.kind)},"queue":${JSON.stringify(r.queue)},"priority":${r.priority},"args":${r.argsJson},` +
        `"max_attempts":${r.maxAttempts},"meta":${r.metaJson ?? 'null'},"missed_fire":${JSON.stringify(r.missedFire)},` +
        `"hash":${JSON.stringify(r.hash)}}`,
    )
    .join(',')}]`;
  const { rows: out } = await db.query<{ cron_name: string; action: CronSyncAction }>(
    `select cron_name, action from ${schema.ident}.cron_sync($1, $2::jsonb, $3)`,
    [instanceId, defs, Math.max(1, Math.round(stalenessSeconds))],
  );
  return out.map((r) => ({ name: r.cron_name, action: r.action }));
}

/** A schedule the leader evaluates (not paused). */
export interface PendingCron {
  name: string;
  cron: string;
  timezone: string;
  missedFire: MissedFire;
  hash: string;
  kind: string;
  queue: string;
  argsJson: string;
  uniqueSpec: { key?: string; states: string[]; periodMs?: number } | null;
  /** The instant the schedule has been handled up to: last fire (or skip), creation or resume. */
  handledTo: Date;
}

/** Every schedule that is not paused, and the database's clock. */
export async function pendingCron(
  db: Queryable,
  schema: Schema,
): Promise<{ now: Date; schedules: PendingCron[] }> {
  const { rows } = await db.query<{
    cron_name: string;
    cron: string;
    timezone: string;
    missed_fire: MissedFire;
    hash: string;
    kind: string;
    queue: string;
    args: string;
    unique_spec: PendingCron['uniqueSpec'];
    handled_to: Date;
    db_now: Date;
  }>(`select * from ${schema.ident}.cron_pending()`);
  const now = rows[0]?.db_now ?? (await dbNow(db));
  return {
    now,
    schedules: rows.map((r) => ({
      name: r.cron_name,
      cron: r.cron,
      timezone: r.timezone,
      missedFire: r.missed_fire,
      hash: r.hash,
      kind: r.kind,
      queue: r.queue,
      argsJson: r.args,
      uniqueSpec: r.unique_spec,
      handledTo: r.handled_to,
    })),
  };
}

async function dbNow(db: Queryable): Promise<Date> {
  const { rows } = await db.query<{ now: Date }>('select now() as now');
  return rows[0]!.now;
}

/** How a fire attempt ended (see cron_fire() in sql/functions/engine/cron.sql). */
export type CronFireOutcome =
  'fired' | 'duplicate' | 'skipped' | 'busy' | 'paused' | 'changed' | 'stale' | 'missing' | 'lanes_busy';

/**
 * Fires (enqueue) or skips one occurrence of a schedule in one transaction of its own, never waiting for a row
 * lock. Must not run inside a caller's transaction block: the lock and the write are meant to end together.
 */
export async function fireCron(
  db: Queryable,
  schema: Schema,
  fire: {
    name: string;
    fireAt: Date;
    hash: string;
    enqueue: boolean;
    unique: { key: string; states: string[] } | null;
  },
): Promise<{ outcome: CronFireOutcome; jobId: string | null }> {
  const { rows } = await db.query<{ outcome: CronFireOutcome; job_id: string | null }>(
    `select outcome, job_id::text from ${schema.ident}.cron_fire($1, $2, $3, $4, $5::jsonb)`,
    [
      fire.name,
      fire.fireAt,
      fire.hash,
      fire.enqueue,
      fire.unique === null ? null : JSON.stringify(fire.unique),
    ],
  );
  return { outcome: rows[0]!.outcome, jobId: rows[0]!.job_id };
}

export type CronTriggerOutcome = 'triggered' | 'duplicate' | 'changed' | 'missing';

/** Enqueues one job of the schedule now; audited when it did (triggered, or duplicate: the key's holder). */
export async function triggerCron(
  db: Queryable,
  schema: Schema,
  name: string,
  hash: string,
  unique: { key: string; states: string[] } | null,
  by: Actor,
): Promise<Audited<{ outcome: CronTriggerOutcome; jobId: string | null }>> {
  const { rows, record } = await audited<{ outcome: CronTriggerOutcome; job_id: string | null }>(
    db,
    schema,
    { by, action: 'cron.trigger', target: name },
    {
      ctes: `act as (select t.outcome, t.job_id::text from ${schema.ident}.cron_trigger($1, $2, $3::jsonb) t)`,
      values: [name, hash, unique === null ? null : JSON.stringify(unique)],
      detail: `(select jsonb_build_object('outcome', a.outcome, 'jobId', a.job_id) from act a)`,
      when: `(select a.outcome from act a) in ('triggered', 'duplicate')`,
    },
  );
  return { value: { outcome: rows[0]!.outcome, jobId: rows[0]!.job_id }, record };
}

export type CronPauseOutcome = 'paused' | 'resumed' | 'unchanged' | 'missing';

/** Pauses or resumes a schedule; audited unless there is no such schedule. */
export async function setCronPaused(
  db: Queryable,
  schema: Schema,
  name: string,
  paused: boolean,
  by: Actor,
): Promise<Audited<CronPauseOutcome>> {
  const { rows, record } = await audited<{ r: CronPauseOutcome }>(
    db,
    schema,
    { by, action: paused ? 'cron.pause' : 'cron.resume', target: name },
    {
      ctes: `act as (select ${schema.ident}.cron_set_paused($1, $2) as r)`,
      values: [name, paused],
      detail: `(select jsonb_build_object('changed', a.r <> 'unchanged') from act a)`,
      when: `(select a.r from act a) <> 'missing'`,
    },
  );
  return { value: rows[0]!.r, record };
}

/** Deletes a schedule; whether it existed, audited. */
export async function removeCron(
  db: Queryable,
  schema: Schema,
  name: string,
  by: Actor,
): Promise<Audited<boolean>> {
  const { rows, record } = await audited<{ r: boolean }>(
    db,
    schema,
    { by, action: 'cron.remove', target: name },
    {
      ctes: `act as (select ${schema.ident}.cron_remove($1) as r)`,
      values: [name],
      detail: `(select jsonb_build_object('removed', a.r) from act a)`,
    },
  );
  return { value: rows[0]?.r === true, record };
}

/** A stored schedule and its state, as cron_list() reports it. */
export interface CronRecord {
  name: string;
  cron: string;
  timezone: string;
  kind: string;
  queue: string;
  priority: number;
  args: unknown;
  maxAttempts: number;
  meta: { metadata?: Record<string, unknown>; tags?: string[]; unique?: Record<string, unknown> } | null;
  missedFire: MissedFire;
  hash: string;
  declaredBy: string;
  declaredAt: Date;
  createdAt: Date;
  pausedAt: Date | null;
  resumedAt: Date | null;
  lastFireAt: Date | null;
  lastJobId: string | null;
  /** Live instances declaring it now. */
  declarers: number;
  /** Set when no live instance declares it: since when (see cron_list()). */
  undeclaredSince: Date | null;
}

export async function listCron(
  db: Queryable,
  schema: Schema,
  stalenessSeconds: number,
): Promise<{ now: Date; schedules: CronRecord[] }> {
  const { rows } = await db.query(
    `select *, last_job_id::text as last_job from ${schema.ident}.cron_list($1)`,
    [Math.max(1, Math.round(stalenessSeconds))],
  );
  const now = (rows[0]?.db_now as Date | undefined) ?? (await dbNow(db));
  return {
    now,
    schedules: rows.map((r) => ({
      name: r.cron_name,
      cron: r.cron,
      timezone: r.timezone,
      kind: r.kind,
      queue: r.queue,
      priority: r.priority,
      args: r.args,
      maxAttempts: r.max_attempts,
      meta: r.meta,
      missedFire: r.missed_fire,
      hash: r.hash,
      declaredBy: r.declared_by,
      declaredAt: r.declared_at,
      createdAt: r.created_at,
      pausedAt: r.paused_at,
      resumedAt: r.resumed_at,
      lastFireAt: r.last_fire_at,
      lastJobId: r.last_job,
      declarers: r.declarers,
      undeclaredSince: r.undeclared_since,
    })),
  };
}
