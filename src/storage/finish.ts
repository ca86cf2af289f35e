import { toStorableJson } from '../model/jsonb.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Settling attempts: one call of the finish() SQL function per completion flush, whatever the mix of
// outcomes. Every row carries its receipt and fencing token; the database accepts only rows whose
// receipt is still open, so a stale writer (rescued, cancelled, or already settled) is a no-op.

/** 'wait': park the job for the callback its attempt registered (see sql/functions/callbacks.sql). */
export type Outcome = 'completed' | 'retry' | 'snooze' | 'failed' | 'cancelled' | 'wait';

export interface Settlement {
  claimSlot: number;
  batchId: string;
  idx: number;
  jobId: string;
  runLease: number;
  outcome: Outcome;
  /** For snooze, and retry with a delay of its own: when the job becomes runnable again. A retry without
   * one waits out the backoff rule (backoff() in sql/functions/common.sql). */
  runAt?: Date;
  /** Appended to the job's error history (retry, failed, cancelled). */
  error?: Record<string, unknown>;
}

/** Returns the ids whose settlement was accepted. */
export async function finishAttempts(
  db: Queryable,
  schema: Schema,
  items: readonly Settlement[],
): Promise<Set<string>> {
  if (items.length === 0) return new Set();
  const { rows } = await db.query<{ job_id: string }>({
    name: `awa-finish-${schema.name}`,
    text: `select job_id::text from ${schema.ident}.finish($1::smallint[], $2::bigint[], $3::int[], $4::bigint[], $5::bigint[], $6::text[], $7::timestamptz[], $8::jsonb[])`,
    values: [
      items.map((s) => s.claimSlot),
      items.map((s) => s.batchId),
      items.map((s) => s.idx),
      items.map((s) => s.jobId),
      items.map((s) => s.runLease),
      items.map((s) => s.outcome),
      items.map((s) => s.runAt ?? null),
      items.map((s) => (s.error ? toStorableJson(JSON.stringify(s.error)) : null)),
    ],
  });
  return new Set(rows.map((r) => r.job_id));
}
