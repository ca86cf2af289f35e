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
