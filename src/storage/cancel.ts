import { storableText } from '../model/jsonb.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Operator cancel: see cancel_job() in sql/002_recovery.sql. The cancel channel carries "<job id>:<run
// lease>" so the process running that attempt can abort its handler.

export type CancelledFrom = 'scheduled' | 'retryable' | 'available' | 'running' | 'waiting_external';

/** Returns the state the job was cancelled from, or null when it had already finished or never existed. */
export async function cancelJob(
  db: Queryable,
  schema: Schema,
  jobId: string,
  reason: string,
): Promise<CancelledFrom | null> {
  const { rows } = await db.query<{ from: CancelledFrom | null }>(
    `select ${schema.ident}.cancel_job($1, $2) as from`,
    [jobId, storableText(reason)],
  );
  return rows[0]?.from ?? null;
}

export function cancelChannel(schema: Schema): string {
  return `awa:${schema.ident}:cancel`;
}

/** The payload of the cancel and callback channels: "<job id>:<run lease>". */
export function parseAttemptPayload(payload: string): { jobId: string; runLease: number } | null {
  const sep = payload.indexOf(':');
  if (sep <= 0) return null;
  return { jobId: payload.slice(0, sep), runLease: Number(payload.slice(sep + 1)) };
}
