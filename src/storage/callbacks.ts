import type { Actor } from '../model/audit.js';
import { toStorableJson } from '../model/jsonb.js';
import { audited, type Audited } from './audit.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// External callbacks: see sql/functions/engine/callbacks.sql.

export interface AttemptRef {
  claimSlot: number;
  batchId: string;
  idx: number;
  jobId: string;
  runLease: number;
}

/** Registers a callback for a running attempt; its token, or null when the attempt is no longer open. */
export async function registerCallback(
  db: Queryable,
  schema: Schema,
  a: AttemptRef,
  timeoutMs: number,
): Promise<string | null> {
  const { rows } = await db.query<{ token: string | null }>(
    `select ${schema.ident}.register_callback($1, $2, $3, $4, $5, $6)::text as token`,
    [a.claimSlot, a.batchId, a.idx, a.jobId, a.runLease, Math.round(timeoutMs)],
  );
  return rows[0]?.token ?? null;
}

export type CallbackAction = 'complete' | 'fail' | 'retry' | 'cancel' | 'resume';

export interface CallbackDelivery {
  /** settled: a parked job was settled; delivered: an attempt waiting in its handler got it; rejected: no
   * open attempt holds this token (unknown, already used, or its attempt ended). */
  outcome: 'settled' | 'delivered' | 'rejected';
  jobId: string | null;
}

/** Delivers a callback. With `by` (an operator delivering it by hand), audited under the job it reached (the
 * token itself is never recorded); without, the job's own external system is answering, which is not an
 * operator action. */
export async function resolveCallback(
  db: Queryable,
  schema: Schema,
  token: string,
  action: CallbackAction,
  payloadJson: string | null,
  runAt: Date | null,
  error: Record<string, unknown> | null,
  by: Actor | null = null,
): Promise<Audited<CallbackDelivery>> {
  const sql = `select outcome, job_id::text from ${schema.ident}.resolve_callback($1::uuid, $2, $3::jsonb, $4, $5::jsonb)`;
  const values = [token, action, payloadJson, runAt, error ? toStorableJson(JSON.stringify(error)) : null];
  type Row = { outcome: CallbackDelivery['outcome']; job_id: string | null };
  if (by === null) {
    const r = (await db.query<Row>(sql, values)).rows[0]!;
    return { value: { outcome: r.outcome, jobId: r.job_id }, record: null };
  }
  const { rows, record } = await audited<Row>(
    db,
    schema,
    { by, action: `callback.${action}`, target: null },
    {
      ctes: `act as (${sql})`,
      values,
      target: '(select a.job_id from act a)',
      detail: `(select jsonb_build_object('outcome', a.outcome, 'error', $5::jsonb -> 'error') from act a)`,
    },
  );
  return { value: { outcome: rows[0]!.outcome, jobId: rows[0]!.job_id }, record };
}

/** The callback recorded for an attempt waiting in its handler, or null until one arrives. */
export async function callbackResult(
  db: Queryable,
  schema: Schema,
  jobId: string,
  runLease: number,
): Promise<{
  action: CallbackAction;
  payload: unknown;
  runAt: string | null;
  error: Record<string, unknown> | null;
} | null> {
  const { rows } = await db.query(`select ${schema.ident}.callback_result($1, $2) as r`, [jobId, runLease]);
  return rows[0]?.r ?? null;
}

/** Parked jobs past their callback timeout, moved through the retry/fail path (leader only). */
export async function expireCallbacks(
  db: Queryable,
  schema: Schema,
  limit: number,
): Promise<{ jobId: string; runLease: number; outcome: 'retry' | 'fail' }[]> {
  const { rows } = await db.query<{ job_id: string; run_lease: string; outcome: 'retry' | 'fail' }>(
    `select job_id::text, run_lease::text, outcome from ${schema.ident}.expire_callbacks($1)`,
    [limit],
  );
  return rows.map((r) => ({ jobId: r.job_id, runLease: Number(r.run_lease), outcome: r.outcome }));
}

/** Milliseconds until the next parked job's callback times out (0: due now), or null when none has a timeout. */
export async function nextCallbackTimeoutMs(db: Queryable, schema: Schema): Promise<number | null> {
  const { rows } = await db.query<{ ms: string | null }>(
    `select ${schema.ident}.next_callback_timeout_ms()::text as ms`,
  );
  const ms = rows[0]?.ms;
  return ms === null || ms === undefined ? null : Number(ms);
}

export function callbackChannel(schema: Schema): string {
  return `awa:${schema.ident}:callback`;
}
