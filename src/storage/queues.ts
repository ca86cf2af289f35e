import type { Actor } from '../model/audit.js';
import { QueueInUseError, UnknownQueueError } from '../model/errors.js';
import { audited, type Audited } from './audit.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Queue settings, fleet-wide: pause and resume (set_queue_paused() in sql/functions/engine/queues.sql), enqueue shards
// (set_enqueue_shards() in sql/functions/engine/lanes.sql), and removing a queue that holds nothing (remove_queue()).
// A queue nothing names (queue_known()) is refused unless `create` is set: a setting would make it exist. Each
// is an audited operator action, recorded only when it acted (not for a queue refused as unknown or in use).

/** Returns whether the queue's state changed (false when it was already paused / running). Throws
 * UnknownQueueError for a queue nothing names, unless `create`. */
export async function setQueuePaused(
  db: Queryable,
  schema: Schema,
  queue: string,
  paused: boolean,
  by: Actor,
  create = false,
): Promise<Audited<boolean>> {
  const { rows, record } = await audited<{ changed: boolean | null }>(
    db,
    schema,
    { by, action: paused ? 'queue.pause' : 'queue.resume', target: queue },
    {
      ctes: `act as (select case when $3::boolean or ${schema.ident}.queue_known($1)
                                 then ${schema.ident}.set_queue_paused($1, $2) end as changed)`,
      values: [queue, paused, create],
      detail: `(select jsonb_build_object('changed', a.changed) from act a)`,
      when: `(select a.changed from act a) is not null`,
    },
  );
  const changed = rows[0]?.changed;
  if (changed == null) throw new UnknownQueueError(queue);
  return { value: changed, record };
}

/** Sets a queue's enqueue shards and creates their lanes; returns the previous count. Throws UnknownQueueError
 * for a queue nothing names, unless `create`. */
export async function setEnqueueShards(
  db: Queryable,
  schema: Schema,
  queue: string,
  shards: number,
  by: Actor,
  create = false,
): Promise<Audited<number>> {
  const { rows, record } = await audited<{ before: number | null }>(
    db,
    schema,
    { by, action: 'queue.shards', target: queue },
    {
      ctes: `act as (select case when $3::boolean or ${schema.ident}.queue_known($1)
                                 then ${schema.ident}.set_enqueue_shards($1, $2::smallint) end as before)`,
      values: [queue, shards, create],
      detail: `(select jsonb_build_object('before', a.before, 'shards', $2::int) from act a)`,
      when: `(select a.before from act a) is not null`,
    },
  );
  const before = rows[0]?.before;
  if (before == null) throw new UnknownQueueError(queue);
  return { value: Number(before), record };
}

/** What removeQueue() left behind: the queue's terminal history (failed, cancelled jobs), which keeps it listed
 * until retention deletes it. */
export interface QueueRemoval {
  queue: string;
  history: number;
}

type Removal =
  | { unknown: true }
  | { removed: true; history: number }
  | { holds: Record<string, number>; servedBy: string[]; busy: boolean };

/**
 * Removes a queue that holds no job in a live state (available, running, waiting, scheduled, retryable) and no
 * DLQ entry, and that no live host (heard from within `liveSecs`) serves: its settings and its lanes. Never waits
 * for a producer: one in flight makes the queue in use. Throws UnknownQueueError or QueueInUseError.
 */
export async function removeQueue(
  db: Queryable,
  schema: Schema,
  queue: string,
  liveSecs: number,
  by: Actor,
): Promise<Audited<QueueRemoval>> {
  const { rows, record } = await audited<{ r: Removal }>(
    db,
    schema,
    { by, action: 'queue.remove', target: queue },
    {
      ctes: `act as (select ${schema.ident}.remove_queue($1, $2) as r)`,
      values: [queue, liveSecs],
      detail: `(select a.r from act a)`,
      when: `(select a.r ? 'removed' from act a)`,
    },
  );
  const r = rows[0]!.r;
  if ('unknown' in r) throw new UnknownQueueError(queue);
  if ('removed' in r) return { value: { queue, history: Number(r.history) }, record };
  const holds = Object.fromEntries(Object.entries(r.holds).map(([k, n]) => [k, Number(n)]));
  throw new QueueInUseError(queue, { holds, servedBy: r.servedBy, busy: r.busy });
}
