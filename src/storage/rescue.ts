import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Rescue of abandoned attempts (silent worker, passed deadline), routed through the fenced finish path.
// See rescue() in sql/002_recovery.sql.

export interface RescuedAttempt {
  jobId: string;
  runLease: number;
  instanceId: string;
  reason: 'worker_lost' | 'deadline_exceeded';
  outcome: 'retry' | 'failed';
}

export async function rescueAbandoned(
  db: Queryable,
  schema: Schema,
  opts: { stalenessSeconds: number; maxBatches: number },
): Promise<RescuedAttempt[]> {
  const { rows } = await db.query<{
    job_id: string;
    run_lease: string;
    instance_id: string;
    reason: RescuedAttempt['reason'];
    outcome: RescuedAttempt['outcome'];
  }>(
    `select job_id::text, run_lease::text, instance_id, reason, outcome from ${schema.ident}.rescue($1, $2)`,
    [Math.max(1, Math.round(opts.stalenessSeconds)), opts.maxBatches],
  );
  return rows.map((r) => ({
    jobId: r.job_id,
    runLease: Number(r.run_lease),
    instanceId: r.instance_id,
    reason: r.reason,
    outcome: r.outcome,
  }));
}

/**
 * Hands back the open receipts of this instance and queue that the host does not know of (a claim whose
 * answer was lost with its connection), claimed more than `olderThanSeconds` ago. Their jobs run again at
 * once without spending an attempt. Returns the attempts handed back.
 */
export async function releaseUnknownReceipts(
  db: Queryable,
  schema: Schema,
  opts: { instanceId: string; queue: string; known: readonly string[]; olderThanSeconds: number },
): Promise<{ jobId: string; runLease: number }[]> {
  const { rows } = await db.query<{ job_id: string; run_lease: string }>(
    `select job_id::text, run_lease::text from ${schema.ident}.release_unknown_receipts($1, $2, $3::bigint[], $4)`,
    [opts.instanceId, opts.queue, opts.known, Math.max(0, Math.round(opts.olderThanSeconds))],
  );
  return rows.map((r) => ({ jobId: r.job_id, runLease: Number(r.run_lease) }));
}
