import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { AwaError, SchemaNotMigratedError, SchemaTooNewError } from '../model/errors.js';
import type { Schema } from './schema.js';

// Migrations are the versioned files in sql/ (NNN_name.sql), applied in order, each in its own
// transaction with its schema_version row, all under one advisory lock so concurrent migrators queue
// instead of racing. The only templating is {{schema}}.

// src/storage/ when run from source, dist/src/storage/ when built: sql/ sits at the package root either way.
const SQL_DIR =
  ['../../sql/', '../../../sql/']
    .map((rel) => fileURLToPath(new URL(rel, import.meta.url)))
    .find((dir) => existsSync(`${dir}001_engine.sql`)) ??
  fileURLToPath(new URL('../../sql/', import.meta.url));

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

let cached: Migration[] | undefined;

export function migrations(): Migration[] {
  cached ??= readdirSync(SQL_DIR)
    .filter((f) => /^\d{3}_.+\.sql$/.test(f))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 3)),
      name: file.slice(4, -4),
      sql: readFileSync(SQL_DIR + file, 'utf8'),
    }));
  return cached;
}

export const LATEST_VERSION = (): number => migrations().at(-1)?.version ?? 0;

export function renderMigration(m: Migration, schema: Schema): string {
  return m.sql.replaceAll('{{schema}}', schema.ident);
}

/** The SQL `migrate` would run from `fromVersion` on, for review or for a DBA to apply. */
export function pendingSql(schema: Schema, fromVersion = 0): string {
  return migrations()
    .filter((m) => m.version > fromVersion)
    .map((m) => {
      const record = `insert into ${schema.ident}.schema_version (version, name) values (${m.version}, '${m.name}');`;
      return `-- ${String(m.version).padStart(3, '0')}_${m.name}\nbegin;\n${renderMigration(m, schema)}\n${record}\ncommit;\n`;
    })
    .join('\n');
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

export interface MigrateResult {
  from: number;
  to: number;
  applied: number[];
}

/** Applies pending migrations. Safe to run from several processes at once. */
export async function applyMigrations(client: pg.ClientBase, schema: Schema): Promise<MigrateResult> {
  const lockKey = `awa:migrate:${schema.name}`;
  await client.query('select pg_advisory_lock(hashtext($1))', [lockKey]);
  try {
    const from = await schemaVersion(client, schema);
    if (from > LATEST_VERSION()) throw new SchemaTooNewError(schema.name, from, LATEST_VERSION());
    const applied: number[] = [];
    for (const m of migrations().filter((x) => x.version > from)) {
      try {
        await client.query('begin');
        await client.query(renderMigration(m, schema));
        await client.query(`insert into ${schema.ident}.schema_version (version, name) values ($1, $2)`, [
          m.version,
          m.name,
        ]);
        await client.query('commit');
      } catch (err) {
        await client.query('rollback').catch(() => {});
        throw new AwaError(
          'AWA_MIGRATION_FAILED',
          `Migration ${m.version}_${m.name} failed: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      }
      applied.push(m.version);
    }
    return { from, to: applied.at(-1) ?? from, applied };
  } finally {
    await client.query('select pg_advisory_unlock(hashtext($1))', [lockKey]).catch(() => {});
  }
}

/** Fails fast with a clear error when the schema is missing or from another build. */
export async function assertMigrated(client: pg.ClientBase, schema: Schema): Promise<void> {
  const have = await schemaVersion(client, schema);
  const want = LATEST_VERSION();
  if (have < want) throw new SchemaNotMigratedError(schema.name, have, want);
  if (have > want) throw new SchemaTooNewError(schema.name, have, want);
}
