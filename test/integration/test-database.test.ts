import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { createTestDatabase, serverUrl } from '../helpers/database.js';

async function query<T extends pg.QueryResultRow>(
  url: string,
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

const exists = async (name: string) =>
  (
    await query<{ n: number }>(serverUrl(), 'select count(*)::int as n from pg_database where datname = $1', [
      name,
    ])
  )[0]?.n === 1;

describe('createTestDatabase', () => {
  it('creates a fresh, empty, connectable database named after the run, and drop() removes it', async () => {
    const runId = inject('testRunId');
    expect(runId).toMatch(/^awa_t_[0-9a-z]+_[0-9a-f]{8}$/);

    const db = await createTestDatabase('Fresh Label!');
    expect(db.name.startsWith(`${runId}_fresh_label_`)).toBe(true);
    expect(await exists(db.name)).toBe(true);

    const [here] = await query<{ db: string; tables: number }>(
      db.url,
      `select current_database() as db,
              (select count(*)::int from pg_class c join pg_namespace n on n.oid = c.relnamespace
                where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg_toast%') as tables`,
    );
    expect(here).toEqual({ db: db.name, tables: 0 });

    // A session left open must not stop drop(): it is terminated first.
    const straggler = new pg.Client(db.url);
    straggler.on('error', () => {});
    await straggler.connect();
    await db.drop();
    expect(await exists(db.name)).toBe(false);
    await straggler.end().catch(() => {});
    await db.drop(); // Idempotent.
  });

  it('gives every call its own database, with names PostgreSQL will not truncate', async () => {
    const label = 'a very long label that would overflow the sixty-three byte identifier limit';
    const [a, b] = await Promise.all([createTestDatabase(label), createTestDatabase(label)]);
    try {
      expect(a.name).not.toBe(b.name);
      for (const db of [a, b]) {
        expect(Buffer.byteLength(db.name)).toBeLessThanOrEqual(63);
        expect(db.name).toMatch(/^[a-z0-9_]+$/);
        expect(await exists(db.name)).toBe(true);
      }
    } finally {
      await Promise.all([a.drop(), b.drop()]);
    }
  });
});
