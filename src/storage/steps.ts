import { toStorableJson } from '../model/jsonb.js';
import { isJobId } from '../model/validation.js';
import type { AttemptRef } from './callbacks.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Durable steps: see sql/functions/engine/steps.sql. Results travel as JSON text both ways, so a step that
// resolved with undefined (no value: SQL null) stays apart from one that resolved with null (JSON null).

/** A step a job recorded. `result` is undefined when its function resolved with undefined. */
export interface RecordedStep {
  name: string;
  result: unknown;
  recordedAt: Date;
  /** The attempt that recorded it. */
  runLease: number;
}

/** What record_step() found: `recorded` (written now), `replayed` (another attempt's row was there), `closed`
 * (the attempt no longer holds the job) or `limit` (the job's step bound is reached). */
export type StepRecord =
  { status: 'recorded' | 'replayed'; result: unknown; recordedAt: Date } | { status: 'closed' | 'limit' };

export interface StepWrite {
  name: string;
  /** The value as JSON text (encodeStepResult: checked when the step finished), or null for undefined. */
  resultJson: string | null;
  /** The job's bound on steps (MAX_STEPS_PER_JOB). */
  maxSteps: number;
}

/** Records a step for an attempt, fenced by its run lease; the row now under that name decides the answer. */
export async function recordStep(
  db: Queryable,
  schema: Schema,
  a: AttemptRef,
  w: StepWrite,
): Promise<StepRecord> {
  const { rows } = await db.query<{ status: StepRecord['status']; result: string | null; recorded_at: Date }>(
    `select status, result::text as result, recorded_at
       from ${schema.ident}.record_step($1, $2, $3, $4, $5, $6, $7::jsonb, $8)`,
    [
      a.claimSlot,
      a.batchId,
      a.idx,
      a.jobId,
      a.runLease,
      w.name,
      w.resultJson === null ? null : toStorableJson(w.resultJson),
      w.maxSteps,
    ],
  );
  return answer(rows[0]!);
}

function answer(r: { status: StepRecord['status']; result: string | null; recorded_at: Date }): StepRecord {
  if (r.status === 'closed' || r.status === 'limit') return { status: r.status };
  return { status: r.status, result: parseResult(r.result), recordedAt: r.recorded_at };
}

/** recordStep() for many attempts' steps in one transaction (one commit for all); answers in input order. */
export async function recordSteps(
  db: Queryable,
  schema: Schema,
  items: readonly { attempt: AttemptRef; write: StepWrite }[],
): Promise<StepRecord[]> {
  if (items.length === 0) return [];
  const { rows } = await db.query<{ status: StepRecord['status']; result: string | null; recorded_at: Date }>(
    `select status, result::text as result, recorded_at
       from ${schema.ident}.record_steps($1::smallint[], $2::bigint[], $3::int[], $4::bigint[], $5::bigint[],
                                         $6::text[], $7::jsonb[], $8)`,
    [
      items.map((i) => i.attempt.claimSlot),
      items.map((i) => i.attempt.batchId),
      items.map((i) => i.attempt.idx),
      items.map((i) => i.attempt.jobId),
      items.map((i) => i.attempt.runLease),
      items.map((i) => i.write.name),
      items.map((i) => (i.write.resultJson === null ? null : toStorableJson(i.write.resultJson))),
      Math.max(...items.map((i) => i.write.maxSteps)),
    ],
  );
  return rows.map(answer);
}

/** The steps job `jobId` recorded, oldest first (none for an id that is not a job's). */
export async function recordedSteps(db: Queryable, schema: Schema, jobId: string): Promise<RecordedStep[]> {
  if (!isJobId(jobId)) return [];
  const { rows } = await db.query<{
    name: string;
    result: string | null;
    recorded_at: Date;
    run_lease: string;
  }>(
    `select name, result::text as result, recorded_at, run_lease from ${schema.ident}.recorded_steps($1::bigint)`,
    [jobId],
  );
  return rows.map((r) => ({
    name: r.name,
    result: parseResult(r.result),
    recordedAt: r.recorded_at,
    runLease: Number(r.run_lease),
  }));
}

export interface StepPrune {
  /** Rows deleted. */
  deleted: number;
  /** Where the next pass goes on from ('0': from the start). */
  nextAfter: string;
}

/** Deletes the steps of jobs that are gone (leader only): looks at up to `limit` jobs after job id `after` whose
 * newest step is older than `minAgeSeconds` (the shortest history retention). */
export async function pruneSteps(
  db: Queryable,
  schema: Schema,
  after: string,
  limit: number,
  minAgeSeconds: number,
): Promise<StepPrune> {
  const { rows } = await db.query<{ deleted: string; next_after: string }>(
    `select deleted, next_after from ${schema.ident}.prune_steps($1::bigint, $2, $3)`,
    [after, limit, Math.round(minAgeSeconds)],
  );
  return { deleted: Number(rows[0]!.deleted), nextAfter: String(rows[0]!.next_after) };
}

function parseResult(text: string | null): unknown {
  return text === null ? undefined : JSON.parse(text);
}
