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
  const { rows } = await db.query(
    `select job_id::text as id, kind, queue, priority, args, attempt, max_attempts, reason, dlq_at, meta
       from ${schema.ident}.dlq_entries where ($1::text is null or queue = $1)
      order by dlq_at, job_id limit $2`,
    [opts.queue ?? null, opts.limit],
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

/** Re-enqueues DLQ entries with a fresh attempt counter; returns the ids moved. */
export async function retryDlq(db: Queryable, schema: Schema, ids: readonly string[]): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `select id::text from ${schema.ident}.dlq_retry($1::bigint[]) as id`,
    [ids],
  );
  return rows.map((r) => r.id);
}

export type DlqTarget = { ids: readonly string[] } | { queue?: string; before: Date };

/** The DLQ entries a purge takes: these ids, or those of a queue (or all) that went there before `before`. */
function dlqWhere(target: DlqTarget): { where: string; values: unknown[] } {
  return 'ids' in target
    ? { where: 'job_id = any($1::bigint[])', values: [target.ids] }
    : {
        where: '($1::text is null or queue = $1) and dlq_at < $2',
        values: [target.queue ?? null, target.before],
      };
}

/** How many DLQ entries a purge of `target` would delete (for a dry run). */
export async function countDlq(db: Queryable, schema: Schema, target: DlqTarget): Promise<number> {
  const { where, values } = dlqWhere(target);
  const { rows } = await db.query<{ n: number }>(
    `select count(*)::int as n from ${schema.ident}.dlq_entries where ${where}`,
    values,
  );
  return rows[0]!.n;
}

/** Deletes the DLQ entries of `target`; returns how many. */
export async function purgeDlq(db: Queryable, schema: Schema, target: DlqTarget): Promise<number> {
  const { where, values } = dlqWhere(target);
  const res = await db.query(`delete from ${schema.ident}.dlq_entries where ${where}`, values);
  return res.rowCount ?? 0;
}
