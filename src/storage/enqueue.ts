import type { JobRow } from '../model/enqueue-options.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// The statements producers run. Each is a single statement, so on the caller's client it joins their open
// transaction (commit = visible, rollback = never existed) and without one it is atomic on its own.
// - One job that is runnable now and not unique (an application enqueuing inside its own transaction, the
//   common case): reserve_lane() and the insert of its row, in one top-level INSERT.
// - Anything else (several jobs, scheduled ones, unique ones): one call of the enqueue() SQL function.
// The first is the second's single-job case without the function around it: no arrays to build and take
// apart, no set-returning call whose rows are collected first, no nested PL/pgSQL call returning a record.
// 32 producers each enqueuing one job per transaction commit about 8 % more transactions a second
// (docs/benchmarking.md, "One job, one statement").
// Both are named (prepared once per connection) unless `named` is false: through a transaction-mode pooler
// the name would live on one server connection and be asked for on another (see pooler.ts).

export interface EnqueueResult {
  /** The job's id; for a duplicate of a unique job, the id of the job holding the key. */
  id: string;
  /** False when a unique job was a duplicate and nothing was inserted. */
  inserted: boolean;
}

/** Whether a job goes straight to its lane (runnable now, no unique key to take) rather than through the
 * enqueue() function: the single-row statement below, and COPY (copy-enqueue.ts), take only these. */
export function appendsToLane(row: JobRow): boolean {
  return row.runAt === null && !row.unique;
}

export async function enqueueRows(
  db: Queryable,
  schema: Schema,
  rows: readonly JobRow[],
  named = true,
): Promise<EnqueueResult[]> {
  if (rows.length === 0) return [];
  const first = rows[0]!;
  if (rows.length === 1 && appendsToLane(first)) return [await appendOne(db, schema, first, named)];
  const { rows: out } = await db.query<{ id: string; inserted: boolean }>({
    name: named ? `awa-enqueue-${schema.name}` : undefined,
    text: `select job_id::text as id, inserted from ${schema.ident}.enqueue($1, $2, $3, $4::jsonb[], $5, $6, $7::jsonb[])`,
    values: jobRowArrays(rows),
  });
  return out;
}

/** The parallel arrays enqueue() takes (and enqueue_flow(), spawn_children()): kinds, queues, priorities, args,
 * max attempts, run times, metas. */
export function jobRowArrays(rows: readonly JobRow[]): unknown[] {
  return [
    rows.map((r) => r.kind),
    rows.map((r) => r.queue),
    rows.map((r) => r.priority),
    rows.map((r) => r.argsJson),
    rows.map((r) => r.maxAttempts),
    rows.map((r) => r.runAt),
    rows.map((r) => r.metaJson),
  ];
}

/** One runnable job: a position in its lane (reserve_lane() in sql/functions/engine/lanes.sql), then its row. */
async function appendOne(db: Queryable, schema: Schema, row: JobRow, named: boolean): Promise<EnqueueResult> {
  const { rows } = await db.query<{ id: string }>({
    name: named ? `awa-enqueue-one-${schema.name}` : undefined,
    text: `insert into ${schema.ident}.ready_entries
             (slot, lane_id, lane_seq, kind, queue, priority, args, max_attempts, meta)
           select r.slot, r.lane_id, r.first_seq, $1, $2, $3, $4::jsonb, $5, $6::jsonb
             from ${schema.ident}.reserve_lane($2::text, $3::smallint, 1, false) r
           returning job_id::text as id`,
    values: [row.kind, row.queue, row.priority, row.argsJson, row.maxAttempts, row.metaJson],
  });
  return { id: rows[0]!.id, inserted: true };
}
