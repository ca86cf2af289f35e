import { spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { UnsafePathError } from '../../src/embedded/errors.js';
import { EmbeddedPostgres } from '../../src/embedded/launcher.js';
import { serverUser } from '../../src/embedded/system-user.js';

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

// As root the server runs as the `postgres` user, which owns the data directory; anything running as
// that user can put symlinks there. The launcher's own files (log, pidfile, password) must never be
// written, read or signalled through it.
describe('EmbeddedPostgres and the server user', () => {
  const isRoot = process.getuid?.() === 0;
  const runAs = serverUser(); // null unless root
  const servers: EmbeddedPostgres[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.destroy()));
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  /** A directory to hold a data directory: ours, which the server user may pass through. */
  function parentDir(): string {
    const dir = mkdtempSync(join(tmpdir(), 'awa-launcher-test-'));
    chmodSync(dir, 0o711);
    dirs.push(dir);
    return dir;
  }
  async function start(dataDir?: string): Promise<EmbeddedPostgres> {
    const server = await EmbeddedPostgres.start({ dataDir });
    servers.push(server);
    return server;
  }
  /** Plants a symlink as the server user could: replacing whatever is there (it owns the directory). */
  function plant(link: string, target: string): void {
    rmSync(link, { force: true });
    symlinkSync(target, link);
    if (runAs) lchownSync(link, runAs.uid, runAs.gid);
  }
  function entries(dir: string): string[] {
    return readdirSync(dir, { recursive: true }).map((e) => join(dir, String(e)));
  }

  it('symlinks planted in the data directory where earlier launchers wrote the log and pidfile are never followed', async () => {
    const parent = parentDir();
    const dataDir = join(parent, 'pgdata');
    const precious = join(parent, 'precious');
    writeFileSync(precious, 'precious\n', { mode: 0o644 });
    const server = await start(dataDir);
    await server.stop();
    for (const name of ['awa-embedded.log', 'awa-embedded.pid']) plant(join(dataDir, name), precious);

    await server.restart(); // appends to its log
    expect(await query(server.url, 'select 1 as ok')).toEqual([{ ok: 1 }]);
    await server.destroy();
    const again = await start(dataDir); // a new launcher on the same data: starts its log afresh
    expect(await query(again.url, 'select 1 as ok')).toEqual([{ ok: 1 }]);
    await again.stop();

    expect(readFileSync(precious, 'utf8')).toBe('precious\n');
    expect(readFileSync(again.logFile, 'utf8')).toMatch(/database system is ready/);
    expect(dirname(again.logFile)).toBe(`${dataDir}.awa`);
    expect(lstatSync(`${dataDir}.awa`).mode & 0o777).toBe(0o700);
  });

  it.runIf(isRoot)(
    'as root, nothing in the data directory belongs to root; the launcher files are in a root-only directory',
    async () => {
      const server = await start();
      const owners = new Set(entries(server.dataDir).map((p) => lstatSync(p).uid));
      expect([...owners]).toEqual([runAs!.uid]);
      const control = lstatSync(dirname(server.logFile));
      expect({ uid: control.uid, mode: control.mode & 0o777 }).toEqual({ uid: 0, mode: 0o700 });
      expect(server.logFile.startsWith(`${server.dataDir}/`)).toBe(false);
      await server.destroy();
      expect(existsSync(dirname(server.dataDir))).toBe(false);
    },
  );

  it.runIf(isRoot)(
    'as root, a pid in postmaster.pid that is not a process of the server user is never signalled',
    async () => {
      const parent = parentDir();
      const dataDir = join(parent, 'pgdata');
      const server = await start(dataDir);
      await server.stop();
      // A root process whose command line names postgres and the data directory, as a stale postmaster's would.
      const decoy = spawn(
        process.execPath,
        ['-e', 'setInterval(() => {}, 1000)', 'postgres', '-D', dataDir],
        {
          stdio: 'ignore',
        },
      );
      try {
        await new Promise((r) => decoy.once('spawn', r));
        writeFileSync(join(dataDir, 'postmaster.pid'), `${decoy.pid}\n${dataDir}\n`);
        lchownSync(join(dataDir, 'postmaster.pid'), runAs!.uid, runAs!.gid);
        await server.restart();
        expect(await query(server.url, 'select 1 as ok')).toEqual([{ ok: 1 }]);
        expect({ exitCode: decoy.exitCode, signalCode: decoy.signalCode }).toEqual({
          exitCode: null,
          signalCode: null,
        });
      } finally {
        decoy.kill('SIGKILL');
      }
    },
  );

  it('takes over the password of a data directory an earlier launcher made, but never through a symlink', async () => {
    const parent = parentDir();
    const dataDir = join(parent, 'pgdata');
    const first = await start(dataDir);
    await first.destroy();
    // Earlier launchers kept the password inside the data directory.
    const legacy = join(dataDir, 'awa-embedded-password');
    writeFileSync(legacy, readFileSync(`${dataDir}.awa/password`), { mode: 0o600 });
    rmSync(`${dataDir}.awa`, { recursive: true });
    const taken = await start(dataDir);
    expect(await query(taken.url, 'select 1 as ok')).toEqual([{ ok: 1 }]);
    expect(taken.url).toBe(first.url.replace(`:${first.port}/`, `:${taken.port}/`));
    await taken.destroy();

    const secret = join(parent, 'secret');
    writeFileSync(secret, 'root only\n', { mode: 0o600 });
    rmSync(`${dataDir}.awa`, { recursive: true });
    plant(legacy, secret);
    const refused = await start(dataDir).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(UnsafePathError);
    expect((refused as Error).message).toContain(`Refusing to use ${legacy}: it is a symlink`);
  });

  it('refuses a control directory someone else put in place, and a data directory in a directory anyone can write', async () => {
    const parent = parentDir();
    const elsewhere = join(parent, 'elsewhere');
    mkdirSync(elsewhere);
    plant(join(parent, 'pgdata.awa'), elsewhere);
    const planted = await start(join(parent, 'pgdata')).catch((e: unknown) => e);
    expect(planted).toBeInstanceOf(UnsafePathError);
    expect((planted as Error).message).toContain(
      `Refusing to use ${join(parent, 'pgdata.awa')}: it is a symlink`,
    );
    expect(readdirSync(elsewhere)).toEqual([]);
    expect(existsSync(join(parent, 'pgdata'))).toBe(false);

    const open = join(parent, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const shared = await start(join(open, 'pgdata')).catch((e: unknown) => e);
    expect(shared).toBeInstanceOf(UnsafePathError);
    expect((shared as Error).message).toMatch(/another user could swap the launcher's files in it/);
    expect(readdirSync(open)).toEqual([]);
  });
});
