import { hostname } from 'node:os';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Worker liveness: one runtime_instances row per worker process. Its heartbeat vouches for every
// receipt that process holds, so heartbeating costs one row write per interval, not one per job.

export interface QueueSetting {
  queue: string;
  dlq: boolean;
}

export async function registerInstance(
  db: Queryable,
  schema: Schema,
  instanceId: string,
  queues: readonly QueueSetting[],
): Promise<void> {
  await db.query(
    `insert into ${schema.ident}.runtime_instances (instance_id, hostname, pid, queues)
       values ($1, $2, $3, $4)
     on conflict (instance_id) do update
       set hostname = excluded.hostname, pid = excluded.pid, queues = excluded.queues,
           heartbeat_at = now(), stopped_at = null`,
    [instanceId, hostname(), process.pid, queues.map((q) => q.queue)],
  );
  // Written only when it changes: hosts start often, settings rarely change.
  await db.query(
    `insert into ${schema.ident}.queue_settings (queue, dlq_enabled)
       select * from unnest($1::text[], $2::boolean[])
     on conflict (queue) do update set dlq_enabled = excluded.dlq_enabled, updated_at = now()
       where queue_settings.dlq_enabled is distinct from excluded.dlq_enabled`,
    [queues.map((q) => q.queue), queues.map((q) => q.dlq)],
  );
}

/** Returns false when this instance has no liveness row any more (cleaned up while the process was away). */
export async function heartbeat(db: Queryable, schema: Schema, instanceId: string): Promise<boolean> {
  const res = await db.query(
    `update ${schema.ident}.runtime_instances set heartbeat_at = now() where instance_id = $1`,
    [instanceId],
  );
  return (res.rowCount ?? 0) > 0;
}

/** After a clean stop: whatever receipts remain open are rescuable at once, without waiting for staleness. */
export async function markStopped(db: Queryable, schema: Schema, instanceId: string): Promise<void> {
  await db.query(`update ${schema.ident}.runtime_instances set stopped_at = now() where instance_id = $1`, [
    instanceId,
  ]);
}
