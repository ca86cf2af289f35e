import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Lanes are created (DDL: six sequences per lane) once per queue and kind, in a short transaction of their own,
// before anyone enqueues into them: a producer's open transaction then never holds the lock that creation
// takes. See ensure_lanes() in sql/functions/engine/lanes.sql.

/** Creates the live lanes of `queues` (or, with `bulk`, the bulk lanes bulk loads go to) that do not exist. */
export async function ensureLanes(
  db: Queryable,
  schema: Schema,
  queues: readonly string[],
  bulk = false,
): Promise<void> {
  for (const queue of new Set(queues)) {
    await db.query(`select ${schema.ident}.ensure_lanes($1, true, $2)`, [queue, bulk]);
  }
}
