import { existsSync } from 'node:fs';
import { Socket } from 'node:net';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { EmbeddedPostgres } from '../../src/embedded/launcher.js';

// Runs the real binaries (as root here: the server then runs as the `postgres` user), whatever server
// the rest of the suite uses.

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

function acceptsConnections(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    socket.setTimeout(2_000, () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(false));
    socket.connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve(true);
    });
  });
}

function processGone(pid: number): string {
  try {
    process.kill(pid, 0);
    return 'still running';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? 'unknown error';
  }
}

describe('EmbeddedPostgres', () => {
  let server: EmbeddedPostgres | undefined;
  afterAll(async () => {
    await server?.destroy();
  });

  it('starts PostgreSQL 18, restarts it on the same data and port, stops it, and destroy() removes its data', async () => {
    const lines: string[] = [];
    server = await EmbeddedPostgres.start({ log: (line) => lines.push(line) });
    const { port, dataDir } = server;
    expect(server.url).toMatch(new RegExp(`^postgres://postgres:[^@]+@127\\.0\\.0\\.1:${port}/postgres$`));
    expect(existsSync(`${dataDir}/PG_VERSION`)).toBe(true);
    expect(lines.some((l) => l.includes('ready'))).toBe(true);

    const [version] = await query<{ version: string; major: number; fsync: string }>(
      server.url,
      "select version(), current_setting('server_version_num')::int / 10000 as major, current_setting('fsync') as fsync",
    );
    expect(version?.version).toMatch(/^PostgreSQL 18\./);
    expect(version?.major).toBe(18);
    expect(version?.fsync).toBe('off');
    await query(
      server.url,
      'create table survives_restart (x int); insert into survives_restart values (42)',
    );

    const firstPid = server.pid;
    await server.restart();
    expect(server.port).toBe(port);
    expect(server.pid).not.toBe(firstPid);
    expect(await query(server.url, 'select x from survives_restart')).toEqual([{ x: 42 }]);

    const pid = server.pid;
    expect(pid).toBeTypeOf('number');
    await server.stop();
    expect(processGone(pid!)).toBe('ESRCH');
    expect(server.pid).toBeNull();
    expect(await acceptsConnections(port)).toBe(false);
    expect(existsSync(`${dataDir}/PG_VERSION`)).toBe(true);

    await server.destroy();
    expect(existsSync(dataDir)).toBe(false);
  });
});
