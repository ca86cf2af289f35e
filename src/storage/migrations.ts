import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { AwaError, SchemaNotMigratedError, SchemaTooNewError } from '../model/errors.js';
import type { Schema } from './schema.js';

// The schema has two parts. Tables are versioned migrations (sql/migrations/NNN_name.sql), applied in order,
// each in its own transaction with its schema_version row. Functions and views (sql/functions/{core,engine,reads}/
// *.sql, one file per storage operation or rule) are not versioned one by one: migrate drops and re-creates all
// of them in one transaction whenever the hash of those files differs from the installed one, so a function's
// history is its file's history. Everything runs under one advisory lock, so concurrent migrators queue instead
// of racing. The only templating is {{schema}}. A migration that changes a column a view reads drops that view
// first (it comes back with the functions).

// src/storage/ when run from source, dist/src/storage/ when built: sql/ sits at the package root either way.
const SQL_DIR =
  ['../../sql/', '../../../sql/']
    .map((rel) => fileURLToPath(new URL(rel, import.meta.url)))
    .find((dir) => existsSync(`${dir}migrations/001_engine.sql`)) ??
  fileURLToPath(new URL('../../sql/', import.meta.url));

export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** Whether hosts of the release before it keep working while it is applied (its `-- rolling:` line). */
  rolling: RollingSafety;
}

/**
 * A migration's own record of a rolling deploy, its line `-- rolling: safe: <why>` or `-- rolling: stop-hosts:
 * <why>`. Safe: hosts of the release before it keep claiming and settling while it is applied and after (they
 * reach tables through the engine's functions, which the new build re-creates to accept their calls). Earlier
 * migrations have no line: unknown, treated as stop-hosts.
 */
export interface RollingSafety {
  safe: boolean | null;
  why: string;
}

function rollingSafety(sql: string): RollingSafety {
  const m = /^-- rolling: (safe|stop-hosts): (.+)$/m.exec(sql);
  if (!m) return { safe: null, why: 'not recorded (before rolling deploys were recorded per migration)' };
  return { safe: m[1] === 'safe', why: m[2]!.trim() };
}

interface FunctionFile {
  name: string;
  sql: string;
}

let cachedMigrations: Migration[] | undefined;
let cachedFunctions: { files: FunctionFile[]; hash: string } | undefined;

export function migrations(): Migration[] {
  cachedMigrations ??= readdirSync(`${SQL_DIR}migrations`)
    .filter((f) => /^\d{3}_.+\.sql$/.test(f))
    .sort()
    .map((file) => {
      const sql = readFileSync(`${SQL_DIR}migrations/${file}`, 'utf8');
      return { version: Number(file.slice(0, 3)), name: file.slice(4, -4), sql, rolling: rollingSafety(sql) };
    });
  return cachedMigrations;
}

const FUNCTION_LAYERS = ['core', 'engine', 'reads'] as const;

function functionFiles(): { files: FunctionFile[]; hash: string } {
  if (!cachedFunctions) {
    // In layers: core (the rules every path shares), engine (what the roles write), reads (operator reads).
    const files = FUNCTION_LAYERS.flatMap((layer) =>
      readdirSync(`${SQL_DIR}functions/${layer}`)
        .filter((f) => f.endsWith('.sql'))
        .sort()
        .map((file) => ({
          name: `${layer}/${file}`,
          sql: readFileSync(`${SQL_DIR}functions/${layer}/${file}`, 'utf8'),
        })),
    );
    const hash = createHash('sha256');
    for (const f of files) hash.update(`${f.name}\n${f.sql}\n`);
    cachedFunctions = { files, hash: hash.digest('hex').slice(0, 32) };
  }
  return cachedFunctions;
}

export const LATEST_VERSION = (): number => migrations().at(-1)?.version ?? 0;

export function renderMigration(m: { sql: string }, schema: Schema): string {
  return m.sql.replaceAll('{{schema}}', schema.ident);
}

/** Drops every function and view of the schema and creates this build's, recording their hash. */
function functionsSql(schema: Schema): string {
  const { files, hash } = functionFiles();
  return [
    // Function bodies reference each other and are checked when called, not when created, so their order is
    // free; a view is bound when created, so it reads only tables or views of an earlier file.
    'set local check_function_bodies = off;',
    `do $drop$ declare f regprocedure; v text; begin
       for v in select format('%I.%I', '${schema.name}', c.relname) from pg_class c
                 where c.relnamespace = to_regnamespace('${schema.name}') and c.relkind = 'v' loop
         execute 'drop view if exists ' || v || ' cascade';
       end loop;
       for f in select p.oid::regprocedure from pg_proc p
                 where p.pronamespace = to_regnamespace('${schema.name}') and p.prokind = 'f' loop
         execute 'drop function ' || f::text;
       end loop;
     end $drop$;`,
    ...files.map((f) => `-- functions/${f.name}\n${renderMigration(f, schema)}`),
    `insert into ${schema.ident}.schema_functions (hash) values ('${hash}')
       on conflict (hash) do update set applied_at = now();`,
  ].join('\n');
}

/** The SQL `migrate` would run from `fromVersion` on, for review or for a DBA to apply. */
export function pendingSql(schema: Schema, fromVersion = 0): string {
  const tables = migrations()
    .filter((m) => m.version > fromVersion)
    .map((m) => {
      const record = `insert into ${schema.ident}.schema_version (version, name) values (${m.version}, '${m.name}');`;
      return `-- ${String(m.version).padStart(3, '0')}_${m.name}\nbegin;\n${renderMigration(m, schema)}\n${record}\ncommit;\n`;
    });
  return [...tables, `-- functions\nbegin;\n${functionsSql(schema)}\ncommit;\n`].join('\n');
}

export async function schemaVersion(client: pg.ClientBase, schema: Schema): Promise<number> {
  const { rows } = await client.query<{ exists: boolean }>(`select to_regclass($1) is not null as exists`, [
    `${schema.ident}.schema_version`,
  ]);
  if (!rows[0]?.exists) return 0;
  const v = await client.query<{ v: number | null }>(
    `select max(version) as v from ${schema.ident}.schema_version`,
  );
  return v.rows[0]?.v ?? 0;
}

async function installedFunctions(client: pg.ClientBase, schema: Schema): Promise<string | null> {
  const { rows } = await client.query<{ exists: boolean }>(`select to_regclass($1) is not null as exists`, [
    `${schema.ident}.schema_functions`,
  ]);
  if (!rows[0]?.exists) return null;
  const h = await client.query<{ hash: string }>(
    `select hash from ${schema.ident}.schema_functions order by applied_at desc limit 1`,
  );
  return h.rows[0]?.hash ?? null;
}

/** True when the schema's installed functions are this build's. */
export async function functionsCurrent(client: pg.ClientBase, schema: Schema): Promise<boolean> {
  return (await installedFunctions(client, schema)) === functionFiles().hash;
}

export interface MigrateResult {
  from: number;
  to: number;
  applied: number[];
  /** True when the engine's functions were (re)installed. */
  functions: boolean;
}

/** Applies pending migrations and this build's functions. Safe to run from several processes at once. */
export async function applyMigrations(client: pg.ClientBase, schema: Schema): Promise<MigrateResult> {
  const lockKey = `awa:migrate:${schema.name}`;
  await client.query('select pg_advisory_lock(hashtext($1))', [lockKey]);
  try {
    const from = await schemaVersion(client, schema);
    if (from > LATEST_VERSION()) throw new SchemaTooNewError(schema.name, from, LATEST_VERSION());
    const applied: number[] = [];
    for (const m of migrations().filter((x) => x.version > from)) {
      await inTransaction(client, `Migration ${m.version}_${m.name}`, async () => {
        await client.query(renderMigration(m, schema));
        await client.query(`insert into ${schema.ident}.schema_version (version, name) values ($1, $2)`, [
          m.version,
          m.name,
        ]);
      });
      applied.push(m.version);
    }
    const functions = !(await functionsCurrent(client, schema));
    if (functions) {
      await inTransaction(client, 'Installing the engine functions', () =>
        client.query(functionsSql(schema)),
      );
    }
    return { from, to: applied.at(-1) ?? from, applied, functions };
  } finally {
    await client.query('select pg_advisory_unlock(hashtext($1))', [lockKey]).catch(() => {});
  }
}

/** How often a step that lost a deadlock is tried again. Running hosts read the tables a migration alters, each
 * statement taking its locks in its own order: PostgreSQL may end the migration's transaction to break a cycle
 * (deadlock_timeout, 1 s by default, has passed by then), and the step is simply run again from the start. */
const DEADLOCK_ATTEMPTS = 5;

async function inTransaction(client: pg.ClientBase, what: string, fn: () => Promise<unknown>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await client.query('begin');
      await fn();
      await client.query('commit');
      return;
    } catch (err) {
      await client.query('rollback').catch(() => {});
      if ((err as { code?: string }).code === '40P01' && attempt < DEADLOCK_ATTEMPTS) continue;
      throw new AwaError('AWA_MIGRATION_FAILED', `${what} failed: ${(err as Error).message}`, { cause: err });
    }
  }
}

/** Fails fast with a clear error when the schema is missing, from another build, or its functions are. */
export async function assertMigrated(client: pg.ClientBase, schema: Schema): Promise<void> {
  const have = await schemaVersion(client, schema);
  const want = LATEST_VERSION();
  if (have < want) throw new SchemaNotMigratedError(schema.name, have, want);
  if (have > want) throw new SchemaTooNewError(schema.name, have, want);
  if (!(await functionsCurrent(client, schema))) {
    throw new SchemaNotMigratedError(schema.name, have, want, 'its functions come from another build');
  }
}
