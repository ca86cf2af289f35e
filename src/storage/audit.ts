import type { Actor, AuditRecord } from '../model/audit.js';
import { toStorableJson } from '../model/jsonb.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// The audit trail (table in sql/migrations/016_audit.sql, reads in sql/functions/engine/audit.sql). An operator
// action and its record are ONE statement: the action's SQL is a CTE named `act`, and the record is inserted
// from it by a data-modifying CTE beside it. A statement commits or rolls back as a whole (in the caller's
// transaction, or on its own), so a rolled-back action leaves no record and a record never exists without its
// action, and the action costs no second round trip.

/** What the record of an action says besides the action's own outcome. */
export interface AuditStamp {
  by: Actor;
  action: string;
  target: string | null;
}

/** The action half of an audited statement. */
export interface AuditedSql {
  /** CTE definitions ending with one named `act`, whose rows are the action's answer. Its placeholders are
   * $1..$n of `values`. */
  ctes: string;
  values: unknown[];
  /** A jsonb expression over `act` for the record's detail. Default null. */
  detail?: string;
  /** A text expression over `act` for the record's target, instead of the stamp's (known only after the
   * action, such as the job a callback token led to). */
  target?: string;
  /** A boolean expression over `act`: the record is written only when it holds (an action that found nothing
   * to act on and fails in the caller, such as an unknown cron schedule). Default true. */
  when?: string;
}

/** An action's answer with the record written of it (null when none was: see AuditedSql.when). */
export interface Audited<T> {
  value: T;
  record: AuditRecord | null;
}

interface AuditRow {
  id: string;
  at: Date | string;
  actor: string;
  origin: string;
  action: string;
  target: string | null;
  detail: Record<string, unknown> | null;
}

function toRecord(r: AuditRow): AuditRecord {
  return {
    id: String(r.id),
    at: r.at instanceof Date ? r.at : new Date(r.at),
    actor: r.actor,
    origin: r.origin,
    action: r.action,
    target: r.target,
    detail: r.detail,
  };
}

/**
 * Runs an operator action and writes its audit record in the same statement. Returns the action's rows
 * (through JSON: cast bigints to text in `act`) and the record written, or null when `when` did not hold.
 */
export async function audited<R>(
  db: Queryable,
  schema: Schema,
  stamp: AuditStamp,
  sql: AuditedSql,
): Promise<{ rows: R[]; record: AuditRecord | null }> {
  const n = sql.values.length;
  const { rows } = await db.query<{ rows: R[]; record: AuditRow | null }>(
    `with ${sql.ctes},
     rec as (
       insert into ${schema.ident}.audit (actor, origin, action, target, detail)
       select $${n + 1}::text, $${n + 2}::text, $${n + 3}::text, ${sql.target ?? `$${n + 4}::text`},
              ${sql.detail ?? 'null::jsonb'}
        where ${sql.when ?? 'true'}
       returning id::text, at, actor, origin, action, target, detail)
     select (select coalesce(json_agg(a), '[]'::json) from act a) as rows,
            (select row_to_json(r) from rec r) as record`,
    [...sql.values, stamp.by.who, stamp.by.origin, stamp.action, ...(sql.target ? [] : [stamp.target])],
  );
  const r = rows[0]!;
  return { rows: r.rows, record: r.record ? toRecord(r.record) : null };
}

/** Writes a record that goes with no SQL action of Awa's (a dashboard login, an application's own action). */
export async function insertAudit(
  db: Queryable,
  schema: Schema,
  stamp: AuditStamp,
  detail: Record<string, unknown> | null,
): Promise<AuditRecord> {
  const { rows } = await db.query<AuditRow>(
    `insert into ${schema.ident}.audit (actor, origin, action, target, detail) values ($1, $2, $3, $4, $5::jsonb)
     returning id::text, at, actor, origin, action, target, detail`,
    [
      stamp.by.who,
      stamp.by.origin,
      stamp.action,
      stamp.target,
      detail === null ? null : toStorableJson(JSON.stringify(detail)),
    ],
  );
  return toRecord(rows[0]!);
}

/** A page of records, newest first. */
export async function auditPage(
  db: Queryable,
  schema: Schema,
  f: { beforeId: string | null; action: string | null; actor: string | null; limit: number },
): Promise<AuditRecord[]> {
  const { rows } = await db.query<AuditRow>(
    `select id::text, at, actor, origin, action, target, detail
       from ${schema.ident}.audit_page($1::bigint, $2, $3, $4)`,
    [f.beforeId, f.action, f.actor, f.limit],
  );
  return rows.map(toRecord);
}

/** Deletes up to `limit` records older than the retention (leader only); returns how many. */
export async function pruneAudit(
  db: Queryable,
  schema: Schema,
  retentionSeconds: number,
  limit: number,
): Promise<number> {
  const { rows } = await db.query<{ n: string }>(`select ${schema.ident}.audit_prune($1, $2) as n`, [
    Math.round(retentionSeconds),
    limit,
  ]);
  return Number(rows[0]!.n);
}
