import { randomBytes } from 'node:crypto';
import pg from 'pg';

// Per-run databases: every system gets a database of its own, named awa_bench_<system>_<random>, so runs
// never share state and cleanup drops exactly what this process created (also on Ctrl-C, see cli.ts).

export const DEFAULT_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

const created = new Map<string, string>(); // name → admin url
const creating = new Set<Promise<void>>();
/** Set once dropAllCreated() began: the run is over (or interrupted), so no database may be created. */
let closing = false;

/**
 * A client of the harness's own. It listens for 'error': a connection the server ends while the client is
 * idle (the bench dropping a database under it, a restart) then fails its next query instead of raising an
 * unhandled 'error' event, which would end the harness without its cleanup.
 */
export function benchClient(url: string, applicationName?: string): pg.Client {
  const client = new pg.Client({
    connectionString: url,
    ...(applicationName ? { application_name: applicationName } : {}),
  });
  client.on('error', () => {});
  return client;
}

export function adminUrl(): string {
  return process.env.DATABASE_URL ?? DEFAULT_URL;
}

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

export async function createDatabase(system: string): Promise<{ name: string; url: string }> {
  const admin = adminUrl();
  const name = `awa_bench_${system.replace(/[^a-z0-9]/g, '_')}_${randomBytes(4).toString('hex')}`;
  if (closing) throw new Error('the bench is stopping: no new database');
  // Recorded before the create is sent: an interrupt while it runs must still drop the database, so
  // dropAllCreated() waits for creates in flight and then drops by name.
  created.set(name, admin);
  const create = (async () => {
    const client = benchClient(admin);
    await client.connect();
    try {
      await client.query(`create database ${name}`);
    } finally {
      await client.end();
    }
  })();
  creating.add(create);
  try {
    await create;
  } catch (err) {
    created.delete(name);
    throw err;
  } finally {
    creating.delete(create);
  }
  return { name, url: withDatabase(admin, name) };
}

export async function dropDatabase(name: string): Promise<void> {
  const admin = created.get(name);
  if (!admin) return; // never drop what we did not create
  const client = benchClient(admin);
  await client.connect();
  try {
    // FORCE: a leaked worker connection must not keep a benchmark database alive.
    await client.query(`drop database if exists ${name} with (force)`);
    created.delete(name);
  } finally {
    await client.end();
  }
}

export async function dropAllCreated(): Promise<void> {
  closing = true;
  await Promise.allSettled([...creating]);
  for (const name of [...created.keys()]) await dropDatabase(name).catch(() => {});
}

export interface TableSample {
  table: string;
  dead: number;
  live: number;
  bytes: number;
}

export interface SchemaSample {
  dead: number;
  live: number;
  bytes: number;
  tables: TableSample[];
}

/** Dead/live tuples and total size (heap + indexes + TOAST) of every table of a schema. */
export async function sampleSchema(db: pg.ClientBase | pg.Pool, schema: string): Promise<SchemaSample> {
  const { rows } = await db.query<{ table: string; dead: string; live: string; bytes: string }>(
    `select relname as table, n_dead_tup as dead, n_live_tup as live, pg_total_relation_size(relid) as bytes
       from pg_stat_user_tables where schemaname = $1 order by relname`,
    [schema],
  );
  const tables = rows.map((r) => ({
    table: r.table,
    dead: Number(r.dead),
    live: Number(r.live),
    bytes: Number(r.bytes),
  }));
  const sum = (k: 'dead' | 'live' | 'bytes') => tables.reduce((a, t) => a + t[k], 0);
  return { dead: sum('dead'), live: sum('live'), bytes: sum('bytes'), tables };
}

/** Every table of a schema (partitions included), for descriptors. */
export async function schemaTables(db: pg.ClientBase | pg.Pool, schema: string): Promise<string[]> {
  const { rows } = await db.query<{ relname: string }>(
    `select relname from pg_stat_user_tables where schemaname = $1 order by relname`,
    [schema],
  );
  return rows.map((r) => r.relname);
}
