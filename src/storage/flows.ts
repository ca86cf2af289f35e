import type { Actor } from '../model/audit.js';
import { InvalidOptionError } from '../model/errors.js';
import type { JobRow } from '../model/enqueue-options.js';
import type { DependencyOutcome, FlowEdge, OnDependencyFailure } from '../model/flow.js';
import { isEnded } from '../model/job-state.js';
import type { JobState } from '../model/job.js';
import { storableText } from '../model/jsonb.js';
import { audited, type Audited } from './audit.js';
import type { AttemptRef } from './callbacks.js';
import type { Queryable } from './database.js';
import { jobRowArrays } from './enqueue.js';
import type { Schema } from './schema.js';

// Flows (sql/functions/engine/flows.sql, reads/flows.sql): a graph written in one statement, read back as one,
// cancelled as one.

export interface EnqueuedFlow {
  flowId: string;
  /** Each job's id, in the order the flow listed them. */
  ids: string[];
}

/** Writes the flow in one statement (on the caller's client, inside its transaction). */
export async function enqueueFlow(
  db: Queryable,
  schema: Schema,
  name: string | null,
  names: readonly string[],
  rows: readonly JobRow[],
  edges: readonly FlowEdge[],
): Promise<EnqueuedFlow> {
  const { rows: out } = await db
    .query<{ flow_id: string; job_id: string }>(
      `select flow_id::text, job_id::text
         from ${schema.ident}.enqueue_flow($1, $2, $3, $4, $5, $6::jsonb[], $7, $8, $9::jsonb[], $10, $11, $12, $13)`,
      [
        name,
        names,
        ...jobRowArrays(rows),
        edges.map((e) => e.from + 1),
        edges.map((e) => (e.to === null ? null : e.to + 1)),
        edges.map((e) => e.id),
        edges.map((e) => e.onFailure),
      ],
    )
    .catch((err: unknown) => {
      throw unknownDependency(err, edges) ?? err;
    });
  return { flowId: out[0]!.flow_id, ids: out.map((r) => r.job_id) };
}

/** enqueue_flow() refuses an edge on a job that does not exist (SQLSTATE 23503): named here as the caller's field. */
function unknownDependency(err: unknown, edges: readonly FlowEdge[]): InvalidOptionError | null {
  const e = err as { code?: string; column?: string; message?: string };
  if (e?.code !== '23503' || e.column !== 'dependsOn') return null;
  const missing = /job (\d+)/.exec(e.message ?? '')?.[1];
  const edge = edges.find((x) => x.id === missing);
  return new InvalidOptionError(
    edge ? `flow.jobs[${edge.from}].dependsOn` : 'flow.jobs[].dependsOn',
    `${e.message}: depend on a job that exists, or leave the dependency out`,
  );
}

export interface FlowJobDependency {
  /** The job depended on. */
  id: string;
  /** Its name in the flow; null for a job outside it. */
  name: string | null;
  onFailure: OnDependencyFailure;
  /** How it ended, once it did: completed, failed (or dead-lettered), cancelled (or skipped). */
  outcome: 'completed' | 'failed' | 'cancelled' | null;
}

export interface FlowJob {
  id: string;
  name: string;
  /** Null once the job's history passed retention. */
  state: JobState | null;
  attempt: number | null;
  finishedAt: Date | null;
  dependsOn: FlowJobDependency[];
}

export interface FlowRecord {
  flowId: string;
  name: string | null;
  createdAt: Date;
  /** running: some job has not ended; completed: every job completed; failed: every job ended and some failed
   * (or were dead-lettered, or are past retention without a state); cancelled: every job ended, none failed,
   * some were cancelled (or skipped). */
  state: 'running' | 'completed' | 'failed' | 'cancelled';
  /** How many of its jobs are in each state. */
  counts: Partial<Record<JobState, number>>;
  jobs: FlowJob[];
}

/** How a flow whose jobs have all ended ended. */
function endOf(states: readonly (JobState | null)[]): 'completed' | 'failed' | 'cancelled' {
  if (states.every((s) => s === 'completed')) return 'completed';
  return states.some((s) => s !== 'completed' && s !== 'cancelled') ? 'failed' : 'cancelled';
}

export async function flowState(db: Queryable, schema: Schema, flowId: string): Promise<FlowRecord | null> {
  const head = await db.query<{ name: string | null; created_at: Date }>(
    `select name, created_at from ${schema.ident}.flows where flow_id = $1`,
    [flowId],
  );
  if (head.rows.length === 0) return null;
  const { rows } = await db.query<{
    job_id: string;
    name: string;
    state: JobState | null;
    attempt: number | null;
    finished_at: Date | null;
    depends_on: FlowJobDependency[];
  }>(
    `select job_id::text, name, state, attempt, finished_at, depends_on from ${schema.ident}.flow_jobs_state($1)`,
    [flowId],
  );
  await readAgainWhereMissing(db, schema, rows);
  const counts: Partial<Record<JobState, number>> = {};
  for (const r of rows) if (r.state) counts[r.state] = (counts[r.state] ?? 0) + 1;
  const open = rows.some((r) => r.state !== null && !isEnded(r.state));
  return {
    flowId,
    name: head.rows[0]!.name,
    createdAt: head.rows[0]!.created_at,
    state: open ? 'running' : endOf(rows.map((r) => r.state)),
    counts,
    jobs: rows.map((r) => ({
      id: r.job_id,
      name: r.name,
      state: r.state,
      attempt: r.attempt,
      finishedAt: r.finished_at,
      dependsOn: r.depends_on,
    })),
  };
}

export interface FlowSummary {
  flowId: string;
  name: string | null;
  createdAt: Date;
  /** How many jobs it holds. */
  jobs: number;
}

/** A page of flows, newest first: pass the last flowId shown as `beforeId` for the next. */
export async function listFlows(
  db: Queryable,
  schema: Schema,
  page: { beforeId?: string; limit: number },
): Promise<FlowSummary[]> {
  const { rows } = await db.query<{ flow_id: string; name: string | null; created_at: Date; jobs: string }>(
    `select f.flow_id::text, f.name, f.created_at,
            (select count(*) from ${schema.ident}.flow_jobs fj where fj.flow_id = f.flow_id) as jobs
       from ${schema.ident}.flows f
      where f.flow_id < coalesce($1::bigint, 9223372036854775807)
      order by f.flow_id desc limit $2`,
    [page.beforeId ?? null, page.limit],
  );
  return rows.map((r) => ({
    flowId: r.flow_id,
    name: r.name,
    createdAt: r.created_at,
    jobs: Number(r.jobs),
  }));
}

/**
 * Reads again, each in a statement of its own, the jobs the flow's read found in no table. A ring slot pruned
 * while that read ran is emptied by TRUNCATE, which a snapshot taken before the prune does not see through: the
 * read finds the slot empty and misses the compact history the prune wrote. A fresh statement sees the history;
 * a job still missing then is past retention.
 */
async function readAgainWhereMissing(
  db: Queryable,
  schema: Schema,
  rows: { job_id: string; state: JobState | null; attempt: number | null; finished_at: Date | null }[],
): Promise<void> {
  for (const row of rows) {
    if (row.state !== null) continue;
    const { rows: again } = await db.query<{ state: JobState; attempt: number; finished_at: Date | null }>(
      `select state, attempt, finished_at from ${schema.ident}.job_state($1)`,
      [row.job_id],
    );
    if (again[0]) Object.assign(row, again[0]);
  }
}

/** Cancels what of the flow has not ended; audited. Returns how many jobs it cancelled (null: no such flow). */
export async function cancelFlow(
  db: Queryable,
  schema: Schema,
  flowId: string,
  reason: string,
  by: Actor,
): Promise<Audited<number | null>> {
  const { rows, record } = await audited<{ n: number | null }>(
    db,
    schema,
    { by, action: 'flow.cancel', target: flowId },
    {
      ctes: `act as (select case when exists (select 1 from ${schema.ident}.flows f where f.flow_id = $1)
                                 then ${schema.ident}.cancel_flow($1, $2) end as n)`,
      values: [flowId, storableText(reason)],
      detail: `(select jsonb_build_object('reason', $2::text, 'cancelled', a.n) from act a)`,
    },
  );
  return { value: rows[0]?.n ?? null, record };
}

/** The jobs `jobId` depends on, how each ended and what each returned. */
export async function dependenciesOf(
  db: Queryable,
  schema: Schema,
  jobId: string,
): Promise<DependencyOutcome[]> {
  const { rows } = await db.query<{
    job_id: string;
    name: string | null;
    on_failure: OnDependencyFailure;
    outcome: DependencyOutcome['outcome'];
    spawned: boolean;
    result: unknown;
  }>(
    `select job_id::text, name, on_failure, outcome, spawned, result from ${schema.ident}.job_dependencies_of($1)`,
    [jobId],
  );
  return rows.map((r) => ({
    id: r.job_id,
    name: r.name,
    onFailure: r.on_failure,
    outcome: r.outcome,
    spawned: r.spawned,
    result: r.result ?? null,
  }));
}

export interface SpawnedChildren {
  /** spawned: written now; replayed: an earlier attempt spawned them (the same ids); closed: the attempt no longer
   * holds the job, nothing written; limit: the job holds as many steps as it may. */
  status: 'spawned' | 'replayed' | 'closed' | 'limit';
  ids: string[];
}

/** Enqueues a running job's children under step `step`, fenced by its attempt (spawn_children()). */
export async function spawnChildren(
  db: Queryable,
  schema: Schema,
  a: AttemptRef,
  spawn: { step: string; maxSteps: number; names: readonly string[]; rows: readonly JobRow[] },
): Promise<SpawnedChildren> {
  const { rows } = await db.query<{ status: SpawnedChildren['status']; job_id: string | null }>(
    `select status, job_id::text
       from ${schema.ident}.spawn_children($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb[], $13, $14,
                                           $15::jsonb[])`,
    [
      a.claimSlot,
      a.batchId,
      a.idx,
      a.jobId,
      a.runLease,
      spawn.step,
      spawn.maxSteps,
      spawn.names,
      ...jobRowArrays(spawn.rows),
    ],
  );
  const status = rows[0]?.status ?? 'closed';
  return { status, ids: rows.flatMap((r) => (r.job_id === null ? [] : [r.job_id])) };
}

/** Edges on jobs outside their flow whose job has ended, resolved by the leader (at most `limit`). */
export async function resolveExternalDependencies(
  db: Queryable,
  schema: Schema,
  limit: number,
): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `select ${schema.ident}.resolve_external_dependencies($1) as n`,
    [limit],
  );
  return rows[0]!.n;
}

/** Deletes flows none of whose jobs is found any more; see prune_flows(). */
export async function pruneFlows(
  db: Queryable,
  schema: Schema,
  after: string,
  limit: number,
  minAgeSeconds: number,
): Promise<{ deleted: number; nextAfter: string }> {
  const { rows } = await db.query<{ deleted: string; next_after: string }>(
    `select deleted, next_after::text from ${schema.ident}.prune_flows($1, $2, $3)`,
    [after, limit, minAgeSeconds],
  );
  return { deleted: Number(rows[0]!.deleted), nextAfter: rows[0]!.next_after };
}
