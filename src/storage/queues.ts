import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Queue pause and resume, fleet-wide (see set_queue_paused() in sql/functions/queues.sql).

/** Returns whether the queue's state changed (false when it was already paused / running). */
export async function setQueuePaused(
  db: Queryable,
  schema: Schema,
  queue: string,
  paused: boolean,
): Promise<boolean> {
  const { rows } = await db.query<{ changed: boolean }>(
    `select ${schema.ident}.set_queue_paused($1, $2) as changed`,
    [queue, paused],
  );
  return rows[0]?.changed === true;
}
