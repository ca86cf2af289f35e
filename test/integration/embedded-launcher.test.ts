import { existsSync } from 'node:fs';
import { Socket } from 'node:net';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { EmbeddedPostgres } from '../../src/embedded/launcher.js';
import { createTestDatabase } from '../helpers/database.js';

const query = async (url: string, sql: string) => {
  const c = new pg.Client(url);
  await c.connect();
  try {
    return (await c.query(sql)).rows;
  } finally {
    await c.end();
  }
};

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = new Socket();
    s.once('error', () => resolve(false));
    s.connect(port, '127.0.0.1', () => {
      s.destroy();
      resolve(true);
    });
  });

describe('embedded PostgreSQL launcher', () => {
  it('starts a real server (as root too), restarts it on the same data, stops it and removes it', async () => {
    const server = await EmbeddedPostgres.start();
    try {
      const [{ server_version_num }] = await query(server.url, 'show server_version_num');
      expect(Number(server_version_num)).toBeGreaterThanOrEqual(180000);
      await query(server.url, 'create table kept (x int); insert into kept values (42)');
      await server.restart();
      expect(await query(server.url, 'select x from kept')).toEqual([{ x: 42 }]);
      const pid = server.pid!;
      await server.stop();
      expect(() => process.kill(pid, 0)).toThrow(/ESRCH/);
      expect(await accepts(server.port)).toBe(false);
      expect(existsSync(server.dataDir)).toBe(true);
    } finally {
      await server.destroy();
    }
    expect(existsSync(server.dataDir)).toBe(false);
  });
});

describe('test databases', () => {
  it('are fresh, empty, named after the run, and dropped on request', async () => {
    const db = await createTestDatabase('Fresh Label!');
    expect(db.name).toMatch(/^awa_t_[a-z0-9]+_[a-z0-9]+_fresh_label_/);
    expect(
      await query(db.url, `select count(*)::int as n from pg_tables where schemaname = 'public'`),
    ).toEqual([{ n: 0 }]);
    await db.drop();
    const admin = new URL(db.url);
    admin.pathname = '/postgres';
    expect(
      await query(
        admin.toString(),
        `select count(*)::int as n from pg_database where datname = '${db.name}'`,
      ),
    ).toEqual([{ n: 0 }]);
  });
});
