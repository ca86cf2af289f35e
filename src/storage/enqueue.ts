import type { JobRow } from '../model/enqueue-options.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// The statement producers run: one call of the enqueue() SQL function for any number of jobs. It is a
// single statement, so on the caller's client it joins their open transaction (commit = visible,
// rollback = never existed) and without one it is atomic on its own.

export interface EnqueueResult {
  /** The job's id; for a duplicate of a unique job, the id of the job holding the key. */
  id: string;
  /** False when a unique job was a duplicate and nothing was inserted. */
  inserted: boolean;
}

export async function enqueueRows(
  db: Queryable,
  schema: Schema,
  rows: readonly JobRow[],
): Promise<EnqueueResult[]> {
  if (rows.length === 0) return [];
  const { rows: out } = await db.query<{ id: string; inserted: boolean }>({
    name: `awa-enqueue-${schema.name}`,
    text: `select job_id::text as id, inserted from ${schema.ident}.enqueue($1, $2, $3, $4::jsonb[], $5, $6, $7::jsonb[])`,
    values: [
      rows.map((r) => r.kind),
      rows.map((r) => r.queue),
      rows.map((r) => r.priority),
      rows.map((r) => r.argsJson),
      rows.map((r) => r.maxAttempts),
      rows.map((r) => r.runAt),
      rows.map((r) => r.metaJson),
    ],
  });
  return out;
}
