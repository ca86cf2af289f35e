import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, migrate, SchemaNotMigratedError, WorkerHost } from '../../src/index.js';
import { createTestDatabase } from '../helpers/database.js';

// The migrations in sql/ on this branch, written out rather than read from the code under test: a new
// migration adds its version (and name) here.
const VERSIONS = [1, 2, 3, 4, 5, 6, 7, 8];
const NAMES = [
  'engine',
  'recovery',
  'concurrent_producers',
  'control_plane',
  'callbacks',
  'operator',
  'cron',
  'job_id_index',
];
const LATEST = 8;

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
