import type { Priority } from '../model/validation.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Claiming: one call of the claim() SQL function takes up to `max` jobs of a queue as one or more claim
// batches (one compact receipt row per lane), committed before any handler runs.

export interface ClaimedJob {
  /** 1-based member index inside its claim batch: with (claimSlot, batchId) it names the receipt. */
  idx: number;
  id: string;
  kind: string;
  args: unknown;
  attempt: number;
  maxAttempts: number;
  runLease: number;
  priority: Priority;
  enqueuedAtMs: number;
  readyAtMs: number;
  meta: {
    metadata?: Record<string, unknown>;
    tags?: string[];
    errors?: unknown[];
    callback?: { payload: unknown; at: string };
    /** The trace context the job was enqueued in (a propagation carrier: traceparent, tracestate…). */
    trace?: Record<string, string>;
  } | null;
}

export interface ClaimBatch {
  batchId: string;
  claimSlot: number;
  jobs: ClaimedJob[];
  /** The receipt's lane is a bulk lane (a COPY load's), whose jobs may wait behind live ones. */
  bulk?: boolean;
}

export interface ClaimRequest {
  queue: string;
  max: number;
  instanceId: string;
  agingSeconds: number;
  deadlineSeconds: number;
  /** How long to wait for a lane another claim holds when it is the only lane with work (default 50 ms). */
  waitMs?: number;
}

/** One claimed row as claimed_json() (sql/functions/engine/claim.sql) writes it. */
type JobTuple = [
  id: string,
  kind: string,
  args: unknown,
  attempt: number,
  maxAttempts: number,
  runLease: number,
  priority: Priority,
  enqueuedAtUs: number,
  readyAtUs: number,
  meta: ClaimedJob['meta'],
];

/** What one claim call got. `contended`: a lane with work was skipped because another claimer held it, so
 * fewer jobs than asked does not mean the queue is empty. `limitedRetryMs`: a limited queue has jobs waiting
 * for their limits (docs/flow-control.md); claim again after this long. `rateLimited`: the queue's limits, as
 * they are now, include a rate (absent when the claim returned no row). */
export interface ClaimResult {
  batches: ClaimBatch[];
  contended: boolean;
  limitedRetryMs?: number;
  rateLimited?: boolean;
}

/** `named`: prepared once per connection (not through a transaction pooler: see pooler.ts). */
export async function claimJobs(
  db: Queryable,
  schema: Schema,
  req: ClaimRequest,
  named = true,
): Promise<ClaimResult> {
  const { rows } = await db.query<{
    batch_id: string | null;
    claim_slot: number;
    jobs: string;
    bulk: boolean;
    retry_ms: number | null;
    rate_limited: boolean;
  }>({
    name: named ? `awa-claim-${schema.name}` : undefined,
    text: `select batch_id::text, claim_slot, jobs::text, bulk, retry_ms, rate_limited from ${schema.ident}.claim($1, $2, $3, $4, $5, $6)`,
    values: [req.queue, req.max, req.instanceId, req.agingSeconds, req.deadlineSeconds, req.waitMs ?? 50],
  });
  const contended = rows.some((r) => r.batch_id === null && r.retry_ms === null);
  const limited = rows.find((r) => r.batch_id === null && r.retry_ms !== null);
  const batches = rows
    .filter((r): r is typeof r & { batch_id: string } => r.batch_id !== null)
    .map((r) => ({
      batchId: r.batch_id,
      claimSlot: r.claim_slot,
      bulk: r.bulk,
      // One JSON.parse per batch is far cheaper than the driver building hundreds of row objects.
      jobs: toJobs(JSON.parse(r.jobs) as (JobTuple | null)[]),
    }));
  return {
    batches,
    contended,
    ...(limited ? { limitedRetryMs: limited.retry_ms! } : {}),
    ...(rows.length > 0 ? { rateLimited: rows[0]!.rate_limited } : {}),
  };
}

/** Member i of the receipt is element i; a limited queue's claim leaves null where a member waits at the gate
 * instead of running (its receipt member is already closed). */
function toJobs(tuples: (JobTuple | null)[]): ClaimedJob[] {
  const jobs: ClaimedJob[] = [];
  tuples.forEach((t, i) => {
    if (t === null) return;
    jobs.push({
      idx: i + 1,
      id: t[0],
      kind: t[1],
      args: t[2],
      attempt: t[3],
      maxAttempts: t[4],
      runLease: t[5],
      priority: t[6],
      enqueuedAtMs: t[7] / 1000,
      readyAtMs: t[8] / 1000,
      meta: t[9],
    });
  });
  return jobs;
}
