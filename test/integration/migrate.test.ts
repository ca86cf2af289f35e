import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/main.js';
import {
  AwaClient,
  migrate,
  SchemaNotMigratedError,
  WorkerHost,
  type MigrationPlan,
} from '../../src/index.js';
import {
  claimJobs,
  migrations,
  registerInstance,
  renderMigration,
  resolveSchema,
} from '../../src/storage/operations.js';
import { createTestDatabase } from '../helpers/database.js';
import { LATEST_VERSION, MIGRATION_NAMES, MIGRATION_VERSIONS } from '../helpers/migrations.js';

const VERSIONS = MIGRATION_VERSIONS;
const NAMES = MIGRATION_NAMES;
const LATEST = LATEST_VERSION;

/** A new database whose schema is at `version`: the tables as those migrations left them, no functions. */
async function databaseAt(name: string, version: number) {
  const db = await createTestDatabase(name);
  const c = new pg.Client(db.url);
  await c.connect();
  const schema = resolveSchema();
  for (const m of migrations().filter((m) => m.version <= version)) {
    await c.query(renderMigration(m, schema));
    await c.query('insert into awa.schema_version (version, name) values ($1, $2)', [m.version, m.name]);
  }
  return { db, c, schema };
}

describe('migrations', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    db = await createTestDatabase('migrate');
  });
  afterAll(async () => {
    await db.drop();
  });

  it('applies every version once, even when several processes migrate at the same moment', async () => {
    const results = await Promise.all([1, 2, 3, 4].map(() => migrate({ connectionString: db.url })));
    const applied = results.flatMap((r) => r.applied);
    expect(applied).toEqual(VERSIONS);
    // One migrator applied everything from an empty database; the others waited and found it done.
    // …and installed the engine's functions once; the others found them current.
    expect([...results].sort((a, b) => a.applied.length - b.applied.length)).toEqual([
      { from: LATEST, to: LATEST, applied: [], functions: false },
      { from: LATEST, to: LATEST, applied: [], functions: false },
      { from: LATEST, to: LATEST, applied: [], functions: false },
      { from: 0, to: LATEST, applied: VERSIONS, functions: true },
    ]);
    const c = new pg.Client(db.url);
    await c.connect();
    const { rows } = await c.query('select version, name from awa.schema_version order by version');
    await c.end();
    expect(rows).toEqual(VERSIONS.map((version, i) => ({ version, name: NAMES[i] })));
    const again = await migrate({ connectionString: db.url });
    expect(again).toEqual({ from: LATEST, to: LATEST, applied: [], functions: false });
  });

  it("upgrading from version 8 keeps a queue's lane and its waiting jobs: they become shard 0, claimed in order, and the lane gets its drained mark", async () => {
    const { db: old, c, schema } = await databaseAt('migrate_v8', 8);
    try {
      // A version-8 database as its own functions left it: one lane (five sequences, no shard column) and
      // two waiting jobs at positions 1 and 2.
      for (const seq of ['enq', 'claim', 'floor', 'mark', 'notify'])
        await c.query(
          `create sequence awa.v8_${seq} as bigint minvalue 0 start 0; select setval('awa.v8_${seq}', 0, true)`,
        );
      await c.query(`select setval('awa.v8_enq', 2, true)`);
      const { rows: lane } = await c.query<{ lane_id: number }>(
        `insert into awa.lanes (queue, priority, enqueue_seq, claim_seq, floor_seq, xid_mark_seq, notify_seq)
         values ('old_q', 2, 'awa.v8_enq', 'awa.v8_claim', 'awa.v8_floor', 'awa.v8_mark', 'awa.v8_notify')
         returning lane_id`,
      );
      const { rows: jobs } = await c.query<{ job_id: string }>(
        `insert into awa.ready_entries (slot, lane_id, lane_seq, kind, queue, priority, args)
         values (0, $1, 1, 'k', 'old_q', 2, '{"n":1}'), (0, $1, 2, 'k', 'old_q', 2, '{"n":2}')
         returning job_id::text`,
        [lane[0]!.lane_id],
      );

      expect(await migrate({ connectionString: old.url })).toEqual({
        from: 8,
        to: LATEST,
        applied: MIGRATION_VERSIONS.filter((v) => v > 8),
        functions: true,
      });
      // Version 11 dropped the lane's xid mark and its sequence, and kept every other cursor.
      const { rows: cursors } = await c.query(
        `select s.name, to_regclass('awa.v8_' || s.name) is not null as kept
           from unnest(array['enq', 'claim', 'floor', 'mark', 'notify']) s(name)`,
      );
      expect(cursors).toEqual([
        { name: 'enq', kept: true },
        { name: 'claim', kept: true },
        { name: 'floor', kept: true },
        { name: 'mark', kept: false },
        { name: 'notify', kept: true },
      ]);
      const { rows: lanes } = await c.query('select lane_id, shard from awa.lanes order by lane_id');
      expect(lanes).toEqual([{ lane_id: lane[0]!.lane_id, shard: 0 }]);
      const client = new AwaClient({ connectionString: old.url, poolSize: 2 });
      try {
        // A new job goes to the same lane, after the two that were waiting.
        const later = (await client.enqueue('k', { n: 3 }, { queue: 'old_q' })).id;
        const req = { queue: 'old_q', max: 10, instanceId: 't', agingSeconds: 3600, deadlineSeconds: 0 };
        const { batches } = await claimJobs(client.pool, schema, req);
        expect(batches.flatMap((b) => b.jobs.map((j) => j.id))).toEqual([
          ...jobs.map((j) => j.job_id),
          later,
        ]);
        // Version 10 gave the old lane its drained mark, and that claim (three of ten asked) moved it.
        const { rows: marks } = await c.query(
          'select pg_sequence_last_value(drained_seq)::int as drained from awa.lanes where lane_id = $1',
          [lane[0]!.lane_id],
        );
        expect(marks).toEqual([{ drained: 3 }]);
        // Version 12 gave it a receipt generation, which that claim's heal kept at the ring's.
        const { rows: gens } = await c.query(
          `select pg_sequence_last_value(receipt_gen_seq)::int as gen,
                  (select max(generation)::int from awa.ring_rotations) as ring
             from awa.lanes where lane_id = $1`,
          [lane[0]!.lane_id],
        );
        expect(gens).toHaveLength(1);
        expect(gens[0].gen).toBe(gens[0].ring);
        expect(await client.setEnqueueShards('old_q', 2)).toBe(1);
      } finally {
        await client.close();
      }
    } finally {
      await c.end();
      await old.drop();
    }
  });

  it("upgrading from version 13 copies each queue's shard count onto its lanes: a sharded queue keeps spreading its jobs, a plain one stays on shard 0", async () => {
    const { db: old, c } = await databaseAt('migrate_v13', 13);
    try {
      // A version-13 database: queue sh_two split into two shards (its priority-2 lanes, shards 0 and 1, and its
      // setting), queue plain with one lane.
      const lanes: [string, number][] = [
        ['sh_two', 0],
        ['sh_two', 1],
        ['plain', 0],
      ];
      for (const [queue, shard] of lanes) {
        const seqs = ['enq', 'claim', 'floor', 'notify', 'drained', 'gen'].map(
          (k) => `awa.v13_${queue}_${shard}_${k}`,
        );
        for (const seq of seqs)
          await c.query(
            `create sequence ${seq} as bigint minvalue 0 start 0; select setval('${seq}', 0, true)`,
          );
        await c.query(
          `insert into awa.lanes (queue, priority, shard, enqueue_seq, claim_seq, floor_seq, notify_seq, drained_seq,
                                  receipt_gen_seq)
           values ($1, 2, $2, $3, $4, $5, $6, $7, $8)`,
          [queue, shard, ...seqs],
        );
      }
      await c.query(`insert into awa.queue_settings (queue, enqueue_shards) values ('sh_two', 2)`);

      expect((await migrate({ connectionString: old.url })).applied).toEqual(
        MIGRATION_VERSIONS.filter((v) => v > 13),
      );
      const { rows } = await c.query(
        'select queue, shard, enqueue_shards from awa.lanes where priority = 2 order by queue, shard',
      );
      expect(rows).toEqual([
        { queue: 'plain', shard: 0, enqueue_shards: 1 },
        { queue: 'sh_two', shard: 0, enqueue_shards: 2 },
        { queue: 'sh_two', shard: 1, enqueue_shards: 2 },
      ]);
      const client = new AwaClient({ connectionString: old.url, poolSize: 2 });
      try {
        for (let i = 0; i < 4; i++) {
          await client.enqueue('k', { i }, { queue: 'sh_two' });
          await client.enqueue('k', { i }, { queue: 'plain' });
        }
        const { rows: placed } = await c.query(
          `select e.queue, l.shard, count(*)::int as n from awa.ready_entries e join awa.lanes l using (lane_id)
            group by 1, 2 order by 1, 2`,
        );
        expect(placed).toEqual([
          { queue: 'plain', shard: 0, n: 4 },
          { queue: 'sh_two', shard: 0, n: 2 },
          { queue: 'sh_two', shard: 1, n: 2 },
        ]);
      } finally {
        await client.close();
      }
    } finally {
      await c.end();
      await old.drop();
    }
  });

  it('a migration that loses a deadlock to a running host is tried again, and applies', async () => {
    // A host's statement holds one table a migration alters and then wants another the migration took first:
    // PostgreSQL breaks the cycle by ending one of them. Migration 24 alters queue_settings, then lanes.
    const { db: at23, c, schema } = await databaseAt('migrate_deadlock', 23);
    const host = new pg.Client(at23.url);
    await host.connect();
    try {
      await host.query('begin');
      await host.query(`select count(*) from ${schema.ident}.lanes`);
      const migrating = migrate({ connectionString: at23.url });
      // The migration holds queue_settings and waits for lanes, which the host holds.
      for (let i = 0; i < 200; i++) {
        const { rows } = await c.query<{ n: number }>(
          `select count(*)::int as n from pg_locks l join pg_class r on r.oid = l.relation
            where not l.granted and r.relname = 'lanes'`,
        );
        if (rows[0]!.n > 0) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      // The host now wants queue_settings: a cycle. The first of the two to look for one (the migration, which
      // has waited longer) is ended; the host's statement then goes through and its transaction ends.
      await host.query(`select count(*) from ${schema.ident}.queue_settings`);
      await host.query('commit');
      const result = await migrating;
      expect(result.applied).toEqual(VERSIONS.filter((v) => v > 23));
      const { rows } = await c.query<{ v: number }>('select max(version)::int as v from awa.schema_version');
      expect(rows[0]!.v).toBe(LATEST);
    } finally {
      await host.end().catch(() => {});
      await c.end();
      await at23.drop();
    }
  });

  it('installs into another schema when asked, independent of the default one', async () => {
    await migrate({ connectionString: db.url, schema: 'jobs_alt' });
    const client = new AwaClient({ connectionString: db.url, schema: 'jobs_alt' });
    const id = (await client.enqueue('k', { a: 1 }, { queue: 'q' })).id;
    expect((await client.getJob(id))?.state).toBe('available');
    const other = new AwaClient({ connectionString: db.url });
    expect(await other.getJob(id)).toBeNull();
    await Promise.all([client.close(), other.close()]);
  });

  it('prints the SQL with the schema substituted instead of running it', () => {
    const client = new AwaClient({ connectionString: 'postgres://localhost/none', schema: 'printed' });
    const sql = client.migrationSql();
    expect(sql).toContain('create schema if not exists "printed"');
    expect(sql).toContain(`insert into "printed".schema_version (version, name) values (1, 'engine')`);
    expect(sql).not.toContain('{{schema}}');
  });

  it('judges a host by the schema version it recorded when it registered, not by when it registered', async () => {
    const client = new AwaClient({ connectionString: db.url });
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      // A host of this build records the version it runs on.
      await registerInstance(
        c,
        resolveSchema(),
        'h-now',
        [{ queue: 'q', dlq: false, concurrency: 1 }],
        '0.y',
      );
      // A host whose row was re-made just now by a build of version 16 (say it lost its row and registered again
      // after the schema moved on): by its start time it would look built for the latest version.
      await c.query(
        `insert into awa.runtime_instances (instance_id, hostname, pid, queues, version, schema_version)
         values ('h16', 'old-box', 7, '{q}', '0.x', 16)`,
      );
      const plan = await client.migrationPlan();
      expect(plan.hosts.map((h) => [h.instanceId, h.builtFor, h.compatible])).toEqual([
        ['h-now', LATEST, true],
        ['h16', 16, false],
      ]);
      expect(plan.compatible).toBe(false);
    } finally {
      await c.query(`delete from awa.runtime_instances where instance_id in ('h-now', 'h16')`);
      await c.end();
      await client.close();
    }
  });

  it("migrate --check says what would run, each migration's rolling record, and who would be left behind", async () => {
    const { db: old, c } = await databaseAt('migrate_check', 17);
    const run = async (args: string[]) => {
      let stdout = '';
      const code = await runCli(['migrate', '--check', ...args], {
        env: { DATABASE_URL: old.url },
        stdout: { write: (s: string) => (stdout += s) },
        stderr: { write: () => {} },
      });
      return { code, stdout };
    };
    try {
      // A host of the version-17 build, running since before anything else was applied.
      await c.query(
        `insert into awa.runtime_instances (instance_id, hostname, pid, queues, version)
         values ('h17', 'box', 42, '{q}', '0.x')`,
      );
      const fine = await run(['--json']);
      expect(fine.code).toBe(0);
      const plan = JSON.parse(fine.stdout) as MigrationPlan;
      expect(plan).toMatchObject({ from: 17, to: LATEST, functions: true, compatible: true });
      expect(plan.pending.map((m) => [m.version, m.rolling.safe])).toEqual(
        MIGRATION_VERSIONS.filter((v) => v > 17).map((v) => [v, true]),
      );
      expect(plan.hosts).toMatchObject([{ instanceId: 'h17', builtFor: 17, compatible: true }]);

      // The same host built for version 16 (it started before 17 was applied): 17 records nothing, so it is
      // left behind, and the check says so and exits 4.
      await c.query(
        `update awa.schema_version set applied_at = now() + interval '1 minute' where version = 17`,
      );
      const behind = await run([]);
      expect(behind.code).toBe(4);
      expect(behind.stdout).toContain('host box:42 (h17, 0.x) built for version 16: would be left behind');
      expect(behind.stdout).toContain('not compatible');
      // Nothing was applied.
      const { rows } = await c.query<{ v: number }>('select max(version) as v from awa.schema_version');
      expect(rows[0]!.v).toBe(17);
    } finally {
      await c.end();
      await old.drop();
    }
  });

  it('refuses to start a worker host on an unmigrated schema, saying what to run', async () => {
    const host = new WorkerHost({ connectionString: db.url, schema: 'never_migrated' });
    const err = await host.start().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SchemaNotMigratedError);
    expect((err as SchemaNotMigratedError).code).toBe('AWA_SCHEMA_NOT_MIGRATED');
    expect((err as Error).message).toContain('awa migrate');
  });
});
