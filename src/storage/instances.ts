import { hostname } from 'node:os';
import type { Queryable } from './database.js';
import { LATEST_VERSION } from './migrations.js';
import type { Schema } from './schema.js';
import type { QueueLimits } from '../model/limits.js';

// Worker liveness: one runtime_instances row per worker process. Its heartbeat vouches for every
// receipt that process holds, so heartbeating costs one row write per interval, not one per job.

export interface QueueSetting {
  queue: string;
  dlq: boolean;
  concurrency: number;
  /** What the host's code declares (null or left out: none); an operator's override stays as it is. */
  limits?: QueueLimits | null;
}

export async function registerInstance(
  db: Queryable,
  schema: Schema,
  instanceId: string,
  queues: readonly QueueSetting[],
  version: string,
): Promise<void> {
  await db.query(
    `insert into ${schema.ident}.runtime_instances
       (instance_id, hostname, pid, queues, version, concurrency, schema_version)
       values ($1, $2, $3, $4, $5, $6, $7)
     on conflict (instance_id) do update
       set hostname = excluded.hostname, pid = excluded.pid, queues = excluded.queues, version = excluded.version,
           concurrency = excluded.concurrency, schema_version = excluded.schema_version, started_at = now(),
           heartbeat_at = now(), stopped_at = null`,
    [
      instanceId,
      hostname(),
      process.pid,
      queues.map((q) => q.queue),
      version,
      JSON.stringify(Object.fromEntries(queues.map((q) => [q.queue, q.concurrency]))),
      // The schema version this build runs on (it refused to start on any other): what `migrate --check` judges
      // the host by.
      LATEST_VERSION(),
    ],
  );
  // Written only when it changes: hosts start often, settings rarely change.
  // Then, for each queue whose declared limits changed, its gate lane is made (so no claim has to) or, with no
  // limits left, its gate opened.
  await db.query(
    `with settings as (
       insert into ${schema.ident}.queue_settings (queue, dlq_enabled, limits_declared)
         select * from unnest($1::text[], $2::boolean[], $3::jsonb[])
       on conflict (queue) do update
         set dlq_enabled = excluded.dlq_enabled, limits_declared = excluded.limits_declared, updated_at = now()
         where (queue_settings.dlq_enabled, queue_settings.limits_declared)
               is distinct from (excluded.dlq_enabled, excluded.limits_declared)
       returning queue, xmax <> 0 as updated, limits_declared
     )
     select ${schema.ident}.limits_changed(s.queue) from settings s
      where s.limits_declared is not null or s.updated`,
    [
      queues.map((q) => q.queue),
      queues.map((q) => q.dlq),
      queues.map((q) => (q.limits ? JSON.stringify(q.limits) : null)),
    ],
  );
}

export interface RuntimeSnapshot {
  inFlight: number;
  isLeader: boolean;
  /** The backend of this instance's leader session while it leads, else null. */
  leaderPid: number | null;
}

/** The liveness write, carrying the host's snapshot. Returns false when this instance has no row any more
 * (cleaned up while the process was away). */
export async function heartbeat(
  db: Queryable,
  schema: Schema,
  instanceId: string,
  snapshot: RuntimeSnapshot,
): Promise<boolean> {
  const res = await db.query(
    // The leader's backend is only ever written, never cleared: a snapshot taken just before this host won
    // the lock must not erase what stand_for_leader() recorded (the seat would be empty until the next
    // heartbeat, and a host frozen in between could never be unseated). An old backend id left behind is
    // harmless: a later leader's row names it more recently.
    `update ${schema.ident}.runtime_instances set heartbeat_at = now(), in_flight = $2, is_leader = $3,
            leader_pid = coalesce($4, leader_pid),
            leader_since = case when $4::int is not null and leader_pid is distinct from $4 then now()
                                else leader_since end
      where instance_id = $1`,
    [instanceId, snapshot.inFlight, snapshot.isLeader, snapshot.leaderPid],
  );
  return (res.rowCount ?? 0) > 0;
}

export interface DescriptorReport {
  subject: 'queue' | 'kind';
  name: string;
  hash: string;
  descriptor: object;
}

/** Upserts this host's descriptors of the queues and kinds it serves. */
export async function reportDescriptors(
  db: Queryable,
  schema: Schema,
  instanceId: string,
  reports: readonly DescriptorReport[],
): Promise<void> {
  if (reports.length === 0) return;
  await db.query(`select ${schema.ident}.report_descriptors($1, $2, $3, $4, $5::jsonb[])`, [
    instanceId,
    reports.map((r) => r.subject),
    reports.map((r) => r.name),
    reports.map((r) => r.hash),
    reports.map((r) => JSON.stringify(r.descriptor)),
  ]);
}

/** After a clean stop: whatever receipts remain open are rescuable at once, without waiting for staleness. */
export async function markStopped(db: Queryable, schema: Schema, instanceId: string): Promise<void> {
  await db.query(`update ${schema.ident}.runtime_instances set stopped_at = now() where instance_id = $1`, [
    instanceId,
  ]);
}
