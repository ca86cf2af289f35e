import type { JobRow } from '../model/enqueue-options.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// The statement producers run: one call of the enqueue() SQL function for any number of jobs. It is a
// single statement, so on the caller's client it joins their open transaction (commit = visible,
// rollback = never existed) and without one it is atomic on its own.

export async function enqueueRows(db: Queryable, schema: Schema, rows: readonly JobRow[]): Promise<string[]> {
  if (rows.length === 0) return [];
  const { rows: ids } = await db.query<{ id: string }>({
    name: `awa-enqueue-${schema.name}`,
    text: `select id::text from ${schema.ident}.enqueue($1, $2, $3, $4::jsonb[], $5, $6, $7::jsonb[]) as id`,
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
  return ids.map((r) => r.id);
}
