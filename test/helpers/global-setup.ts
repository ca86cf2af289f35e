import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { resolvePgServer, type PgServer } from './pg-server.js';

// Runs once per vitest run, in the main process: finds a PostgreSQL server for every test file and
// names the run. Test databases start with the run id, so teardown can drop exactly this run's
// databases on a server that may hold other people's.

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin URL of the run's PostgreSQL server; tests get their own databases from createTestDatabase. */
    pgServerUrl: string;
    /** Prefix of every database this run creates. */
    testRunId: string;
  }
}

let server: PgServer | null = null;
let runId = '';

export async function setup(project: TestProject): Promise<void> {
  runId = `awa_t_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  server = await resolvePgServer();
  process.stderr.write(`[awa tests] PostgreSQL: ${server.source}; this run's databases are ${runId}_*\n`);
  project.provide('pgServerUrl', server.url);
  project.provide('testRunId', runId);
}

export async function teardown(): Promise<void> {
  if (!server) return;
  try {
    await dropRunDatabases(server.url, runId);
  } finally {
    await server.stop();
    server = null;
  }
}

async function dropRunDatabases(url: string, prefix: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    // starts_with, not LIKE: the underscores in the run id would be LIKE wildcards.
    const { rows } = await client.query<{ datname: string }>(
      'select datname from pg_database where starts_with(datname, $1)',
      [`${prefix}_`],
    );
    for (const { datname } of rows) {
      await client.query(
        'select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
        [datname],
      );
      await client.query(`drop database if exists ${client.escapeIdentifier(datname)}`);
    }
  } finally {
    await client.end();
  }
}
