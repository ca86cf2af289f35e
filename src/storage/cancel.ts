import type { Actor } from '../model/audit.js';
import { storableText } from '../model/jsonb.js';
import { audited, type Audited } from './audit.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Operator cancel: see cancel_job() in sql/002_recovery.sql. The cancel channel carries "<job id>:<run
// lease>" so the process running that attempt can abort its handler.

export type CancelledFrom =
  'scheduled' | 'retryable' | 'blocked' | 'available' | 'running' | 'waiting_external';

/** Returns the state the job was cancelled from, or null when it had already finished or never existed;
 * audited. */
export async function cancelJob(
  db: Queryable,
  schema: Schema,
  jobId: string,
  reason: string,
  by: Actor,
): Promise<Audited<CancelledFrom | null>> {
  const { rows, record } = await audited<{ from: CancelledFrom | null }>(
    db,
    schema,
    { by, action: 'job.cancel', target: jobId },
    {
      ctes: `act as (select ${schema.ident}.cancel_job($1, $2) as from)`,
      values: [jobId, storableText(reason)],
      detail: `(select jsonb_build_object('reason', $2::text, 'cancelledFrom', a.from) from act a)`,
    },
  );
  return { value: rows[0]?.from ?? null, record };
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
