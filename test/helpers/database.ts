import pg from 'pg';
import { inject } from 'vitest';

// Each test file works in databases of its own on the run's server (see global-setup.ts), named
// <run id>_<label>_<n> so the run's teardown finds any a test forgot to drop.

export interface TestDatabase {
  /** Connection URL of the new database (the server URL with its database name swapped). */
  url: string;
  name: string;
  /** Ends the database's remaining sessions and drops it; safe to call twice. */
  drop(): Promise<void>;
}

/** PostgreSQL truncates identifiers longer than this, which would make two names collide silently. */
const MAX_NAME_BYTES = 63;
/** SQLSTATEs of a name already taken: duplicate_database, or unique_violation when two creates race. */
const NAME_TAKEN = new Set(['42P04', '23505']);
/** object_in_use: a session connected between the terminate and the drop. */
const IN_USE = '55006';

let counter = 0;

/** A pool for a test's own statements beside the code under test. Its idle clients can be terminated under it
 * (the test's own chaos, or the drop of the database at the end), so their errors are expected, not unhandled. */
export function sidePool(url: string, max: number, applicationName?: string): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max,
    ...(applicationName === undefined ? {} : { application_name: applicationName }),
  });
  pool.on('error', () => {});
  return pool;
}

/** The run's server (connected to its maintenance database), for tests that need server-level access. */
export function serverUrl(): string {
  return inject('pgServerUrl');
}

export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const runId = inject('testRunId');
  // The counter is per worker process; another file may be using the same label, so a taken name
  // just moves on to the next number.
  for (let attempt = 0; attempt < 100; attempt++) {
    const name = databaseName(runId, label, counter++);
    try {
      await withAdmin((c) => c.query(`create database ${c.escapeIdentifier(name)}`));
    } catch (err) {
      if (NAME_TAKEN.has((err as { code?: string }).code ?? '')) continue;
      throw err;
    }
    const url = new URL(serverUrl());
    url.pathname = `/${name}`;
    return { url: url.toString(), name, drop: () => dropDatabase(name) };
  }
  throw new Error(`createTestDatabase(${JSON.stringify(label)}): no free name after 100 attempts`);
}

function databaseName(runId: string, label: string, n: number): string {
  const suffix = `_${n}`;
  const room = MAX_NAME_BYTES - runId.length - 1 - suffix.length;
  const safe =
    label
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '_')
      .replace(/^_+|_+$/g, '')
      .slice(0, Math.max(room, 0))
      .replace(/_+$/, '') || 'db';
  return `${runId}_${safe}${suffix}`;
}

async function dropDatabase(name: string): Promise<void> {
  await withAdmin(async (c) => {
    for (let attempt = 1; ; attempt++) {
      await c.query(
        'select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
        [name],
      );
      try {
        await c.query(`drop database if exists ${c.escapeIdentifier(name)}`);
        return;
      } catch (err) {
        // A pool that reconnects can slip a session in after the terminate: end it and drop again.
        if ((err as { code?: string }).code !== IN_USE || attempt >= 5) throw err;
        await new Promise((r) => setTimeout(r, 50 * attempt));
      }
    }
  });
}

async function withAdmin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: serverUrl(), connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}
