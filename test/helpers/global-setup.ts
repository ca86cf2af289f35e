import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { resolveServer, type ResolvedServer } from './server.js';

// Resolves the PostgreSQL server once per run and gives the run a unique id; every database a test
// creates starts with that id, and teardown drops those (and only those).

declare module 'vitest' {
  export interface ProvidedContext {
    pgServerUrl: string;
    testRunId: string;
  }
}

let server: ResolvedServer | null = null;
let runId = '';

export async function setup(project: TestProject): Promise<void> {
  server = await resolveServer();
  runId = `awa_t_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 7)}`;
  process.stderr.write(`[awa tests] PostgreSQL from ${server.source}; databases named ${runId}_*\n`);
  project.provide('pgServerUrl', server.url);
  project.provide('testRunId', runId);
}

export async function teardown(): Promise<void> {
  if (!server) return;
  const c = new pg.Client(server.url);
  try {
    await c.connect();
    const { rows } = await c.query<{ datname: string }>(
      `select datname from pg_database where datname like $1`,
      [`${runId}\\_%`],
    );
    for (const { datname } of rows) {
      await c.query(
        `select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`,
        [datname],
      );
      await c.query(`drop database if exists ${c.escapeIdentifier(datname)}`);
    }
  } finally {
    await c.end().catch(() => {});
    await server.stop();
  }
}
