import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Queue settings, fleet-wide: pause and resume (set_queue_paused() in sql/functions/queues.sql), enqueue shards
// (set_enqueue_shards() in sql/functions/lanes.sql).

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

/** Sets a queue's enqueue shards and creates their lanes; returns the previous count. */
export async function setEnqueueShards(
  db: Queryable,
  schema: Schema,
  queue: string,
  shards: number,
): Promise<number> {
  const { rows } = await db.query<{ before: number }>(
    `select ${schema.ident}.set_enqueue_shards($1, $2::smallint) as before`,
    [queue, shards],
  );
  return Number(rows[0]?.before);
}
