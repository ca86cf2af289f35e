import pg from 'pg';
import { inject } from 'vitest';

// A fresh database per caller, named after the run (so teardown finds it) and the label.

let counter = 0;

export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

export function serverUrl(): string {
  return inject('pgServerUrl');
}

export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const safe = label
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .slice(0, 20);
  const name = `${inject('testRunId')}_${safe}_${process.pid}_${counter++}`.slice(0, 63);
  await admin((c) => c.query(`create database ${c.escapeIdentifier(name)}`));
  const url = new URL(serverUrl());
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: () =>
      admin(async (c) => {
        await c.query(
          `select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`,
          [name],
        );
        await c.query(`drop database if exists ${c.escapeIdentifier(name)}`);
      }),
  };
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client(serverUrl());
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}
