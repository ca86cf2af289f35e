import type { Actor } from '../model/audit.js';
import { audited, type Audited } from './audit.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// The dead-letter queue: terminal failures of DLQ-enabled queues, held for an operator.

export interface DlqEntry {
  id: string;
  kind: string;
  queue: string;
  priority: number;
  args: unknown;
  attempt: number;
  maxAttempts: number;
  reason: string | null;
  dlqAt: Date;
  errors: unknown[];
}

export async function listDlq(
  db: Queryable,
  schema: Schema,
  opts: { queue?: string; limit: number },
): Promise<DlqEntry[]> {
  const { where, values } = dlqWhere({ queue: opts.queue });
  const { rows } = await db.query(
    `select job_id::text as id, kind, queue, priority, args, attempt, max_attempts, reason, dlq_at, meta
       from ${schema.ident}.dlq_entries where ${where}
      order by dlq_at, job_id limit $${values.length + 1}`,
    [...values, opts.limit],
  );
  return rows.map((r) => ({
    id: r.id,
    kind: r.kind,
    queue: r.queue,
    priority: r.priority,
    args: r.args,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    reason: r.reason,
    dlqAt: r.dlq_at,
    errors: (r.meta?.errors as unknown[] | undefined) ?? [],
  }));
}

/** Re-enqueues DLQ entries with a fresh attempt counter; returns the ids moved, audited. */
export async function retryDlq(
  db: Queryable,
  schema: Schema,
  ids: readonly string[],
  by: Actor,
): Promise<Audited<string[]>> {
  const { rows, record } = await audited<{ id: string }>(
    db,
    schema,
    { by, action: 'dlq.retry', target: ids.length === 1 ? ids[0]! : null },
    {
      ctes: `act as (select id::text as id from ${schema.ident}.dlq_retry($1::bigint[]) as id)`,
      values: [ids],
      detail: `jsonb_build_object('ids', (select coalesce(jsonb_agg(x::text), '[]') from unnest($1::bigint[]) x),
                                  'retried', (select coalesce(jsonb_agg(a.id), '[]') from act a))`,
    },
  );
  return { value: rows.map((r) => r.id), record };
}

export type DlqTarget = { ids: readonly string[] } | { queue?: string; before: Date };

/** Which DLQ entries a read takes: those of a queue, of a kind, that went there before `before` (each
 * optional; none is every entry). A purge's target by age is one of these. */
export interface DlqFilter {
  queue?: string;
  kind?: string;
  before?: Date;
}

/** The one rule for which DLQ entries a purge, a count or a page takes: these ids, or those matching a filter. */
function dlqWhere(target: { ids: readonly string[] } | DlqFilter): { where: string; values: unknown[] } {
  return 'ids' in target
    ? { where: 'job_id = any($1::bigint[])', values: [target.ids] }
    : {
        where:
          '($1::text is null or queue = $1) and ($2::text is null or kind = $2) ' +
          'and ($3::timestamptz is null or dlq_at < $3)',
        values: [target.queue ?? null, target.kind ?? null, target.before ?? null],
      };
}

/** How many DLQ entries `target` takes (a purge's dry run, the dashboard's totals). With `atMost`, counting
 * stops there, so the cost is bounded however large the DLQ grows. */
export async function countDlq(
  db: Queryable,
  schema: Schema,
  target: { ids: readonly string[] } | DlqFilter,
  atMost?: number,
): Promise<number> {
  const { where, values } = dlqWhere(target);
  const rows = `select 1 from ${schema.ident}.dlq_entries where ${where}`;
  const { rows: counted } = await db.query<{ n: number }>(
    atMost === undefined
      ? `select count(*)::int as n from (${rows}) x`
      : `select count(*)::int as n from (${rows} limit $${values.length + 1}) x`,
    atMost === undefined ? values : [...values, atMost],
  );
  return counted[0]!.n;
}

/** A bounded count: `capped` when counting stopped at its bound (there may be more). */
export interface DlqCount {
  count: number;
  capped: boolean;
}

/** A DLQ entry as a listing shows it: without args and error history, with why it went there. */
export interface DlqSummary {
  id: string;
  kind: string;
  queue: string;
  priority: number;
  attempt: number;
  maxAttempts: number;
  /** The last attempt's error: why the job was dead-lettered. */
  reason: string | null;
  dlqAt: Date;
}

/** A page of the DLQ entries matching `filter`, newest first by id (keyset on `beforeId`): through the
 * primary key, or the (queue, job_id) index for one queue. */
export async function dlqPage(
  db: Queryable,
  schema: Schema,
  opts: DlqFilter & { beforeId?: string; limit: number },
): Promise<DlqSummary[]> {
  const { where, values } = dlqWhere(opts);
  const n = values.length;
  const { rows } = await db.query(
    `select job_id::text as id, kind, queue, priority, attempt, max_attempts, dlq_at,
            coalesce(reason, meta -> 'errors' -> -1 ->> 'error') as reason
       from ${schema.ident}.dlq_entries
      where ${where} and ($${n + 1}::bigint is null or job_id < $${n + 1})
      order by job_id desc limit $${n + 2}`,
    [...values, opts.beforeId ?? null, opts.limit],
  );
  return rows.map((r) => ({
    id: r.id,
    kind: r.kind,
    queue: r.queue,
    priority: r.priority,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    reason: r.reason,
    dlqAt: r.dlq_at,
  }));
}

/** Deletes the DLQ entries of `target`; returns how many, audited. */
export async function purgeDlq(
  db: Queryable,
  schema: Schema,
  target: DlqTarget,
  by: Actor,
): Promise<Audited<number>> {
  const { where, values } = dlqWhere(target);
  const byIds = 'ids' in target;
  const asked = byIds
    ? { ids: target.ids }
    : { queue: target.queue ?? null, before: target.before.toISOString() };
  const single = byIds ? (target.ids.length === 1 ? target.ids[0]! : null) : (target.queue ?? null);
  const { rows, record } = await audited<{ n: number }>(
    db,
    schema,
    { by, action: 'dlq.purge', target: single },
    {
      ctes: `gone as (delete from ${schema.ident}.dlq_entries where ${where} returning 1),
             act as (select count(*)::int as n from gone)`,
      values: [...values, JSON.stringify(asked)],
      detail: `$${values.length + 1}::jsonb || (select jsonb_build_object('purged', a.n) from act a)`,
    },
  );
  return { value: rows[0]!.n, record };
}
