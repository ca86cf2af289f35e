import type pg from 'pg';
import {
  functionsCurrent,
  LATEST_VERSION,
  migrations,
  schemaVersion,
  type RollingSafety,
} from './migrations.js';
import type { Schema } from './schema.js';

// What `migrate` would do, and whether the hosts running now survive it: the check a rolling deploy makes before
// it migrates (docs/deployment.md). A host refuses to start on a schema that is not at its own build's version,
// so a running host was built for the version the schema had when it started: that is read from the schema's
// own history, and needs nothing from the host.

export interface PendingMigration {
  version: number;
  name: string;
  rolling: RollingSafety;
}

export interface RunningHost {
  instanceId: string;
  hostname: string;
  pid: number;
  /** The package version the host reported. */
  version: string | null;
  startedAt: Date;
  /** The schema version the host was built for (the schema's version when it started). */
  builtFor: number;
  /** It keeps working if the plan is applied: every migration after its version is safe. */
  compatible: boolean;
}

export interface MigrationPlan {
  schema: string;
  from: number;
  to: number;
  pending: PendingMigration[];
  /** The engine's functions would be re-installed (this build's differ from the installed ones). */
  functions: boolean;
  /** Hosts whose heartbeat is younger than the liveness window and that have not stopped. */
  hosts: RunningHost[];
  /** No running host is left behind by a pending migration. */
  compatible: boolean;
}

export async function migrationPlan(
  client: pg.ClientBase,
  schema: Schema,
  liveSeconds: number,
): Promise<MigrationPlan> {
  const from = await schemaVersion(client, schema);
  const pending = migrations()
    .filter((m) => m.version > from)
    .map(({ version, name, rolling }) => ({ version, name, rolling }));
  const hosts = from === 0 ? [] : await runningHosts(client, schema, liveSeconds);
  // A host keeps working only if every migration since its build (applied already or about to be) was safe
  // under running hosts: one that started before an unsafe migration is behind whatever comes next.
  const planned = hosts.map((h) => ({
    ...h,
    compatible: migrations().every((m) => m.version <= h.builtFor || m.rolling.safe === true),
  }));
  return {
    schema: schema.name,
    from,
    to: Math.max(from, LATEST_VERSION()),
    pending,
    functions: from === 0 || !(await functionsCurrent(client, schema)),
    hosts: planned,
    compatible: planned.every((h) => h.compatible),
  };
}

async function runningHosts(
  client: pg.ClientBase,
  schema: Schema,
  liveSeconds: number,
): Promise<Omit<RunningHost, 'compatible'>[]> {
  const { rows } = await client.query<{
    instance_id: string;
    hostname: string;
    pid: number;
    version: string | null;
    started_at: Date;
    built_for: number | null;
  }>(
    // What the host recorded (migration 022); a host of an earlier release recorded nothing, and was built for
    // the schema's version when it started, as hosts refuse any other. Read through to_jsonb: before 022 is
    // applied the column does not exist, and the check runs before migrating.
    `select ri.instance_id, ri.hostname, ri.pid, ri.version, ri.started_at,
            coalesce((to_jsonb(ri) ->> 'schema_version')::int,
                     (select max(v.version) from ${schema.ident}.schema_version v where v.applied_at <= ri.started_at))
              as built_for
       from ${schema.ident}.runtime_instances ri
      where ri.stopped_at is null and ri.heartbeat_at > now() - make_interval(secs => $1)
      order by ri.started_at, ri.instance_id`,
    [liveSeconds],
  );
  return rows.map((r) => ({
    instanceId: r.instance_id,
    hostname: r.hostname,
    pid: r.pid,
    version: r.version,
    startedAt: r.started_at,
    builtFor: r.built_for ?? 0,
  }));
}
