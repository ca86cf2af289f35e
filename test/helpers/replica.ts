import { spawn, spawnSync } from 'node:child_process';
import { accessSync, appendFileSync, chownSync, constants, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { serverUser, type RunAs } from '../../src/embedded/system-user.js';
import { freePort } from './free-port.js';

// A primary and a streaming hot standby of the test's own: two clusters made with the server's own initdb and
// pg_basebackup, each on a free port on 127.0.0.1, in a temp directory stop() removes. The shared test server
// cannot be the primary: its pg_hba has no replication entry and it is not ours to change. As root, the
// clusters run as the unprivileged `postgres` user (PostgreSQL refuses root). The binaries are PostgreSQL's
// own (Debian: /usr/lib/postgresql/<major>/bin, or $PG_BINDIR): without them the tests that need a replica fail
// saying so, rather than skip.

export interface ReplicaPair {
  /** postgres://…/postgres on the primary. */
  readonly primaryUrl: string;
  /** The same database on the standby (read-only, replaying the primary's WAL). */
  readonly replicaUrl: string;
  /** Stops replaying WAL on the standby (it keeps receiving): reads there stand still until resume(). */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Resolves once the standby has replayed everything the primary has written so far. */
  caughtUp(timeoutMs?: number): Promise<void>;
  /** Stops both servers and removes their directories. */
  stop(): Promise<void>;
}

const BINARIES = ['initdb', 'pg_ctl', 'pg_basebackup', 'postgres'];

/** Where initdb, pg_ctl and pg_basebackup are: $PG_BINDIR, else the newest /usr/lib/postgresql/<major>/bin. */
export function findPgBinDir(): string {
  const fromEnv = process.env.PG_BINDIR;
  const candidates = fromEnv ? [fromEnv] : debianBinDirs();
  const found = candidates.find((dir) => BINARIES.every((b) => executable(join(dir, b))));
  if (found) return found;
  throw new Error(
    `PostgreSQL's server binaries (${BINARIES.join(', ')}) are missing` +
      `${fromEnv ? ` from PG_BINDIR=${fromEnv}` : ' (looked in /usr/lib/postgresql/*/bin)'}, and the read-replica ` +
      'tests need them to make a primary and a standby: install PostgreSQL (Debian/Ubuntu: apt-get install -y ' +
      'postgresql) or set PG_BINDIR to the directory holding them.',
  );
}

function debianBinDirs(): string[] {
  try {
    return readdirSync('/usr/lib/postgresql')
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a))
      .map((v) => join('/usr/lib/postgresql', v, 'bin'));
  } catch {
    return [];
  }
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export async function startReplicaPair(): Promise<ReplicaPair> {
  const bin = findPgBinDir();
  const runAs = serverUser();
  const root = mkdtempSync(join(tmpdir(), 'awa-replica-'));
  if (runAs) chownSync(root, runAs.uid, runAs.gid);
  const primaryDir = join(root, 'primary');
  const standbyDir = join(root, 'standby');
  const started: string[] = [];
  const stopAll = async () => {
    for (const dir of started.reverse())
      run(bin, 'pg_ctl', ['stop', '-D', dir, '-m', 'immediate', '-w'], runAs);
    rmSync(root, { recursive: true, force: true });
  };
  try {
    const primaryPort = await freePort();
    run(bin, 'initdb', ['-D', primaryDir, '-U', 'postgres', '--auth=trust', '-N', '-E', 'UTF8'], runAs);
    configure(primaryDir, root, primaryPort, [
      'wal_level = replica',
      'max_wal_senders = 4',
      'wal_keep_size = 64MB',
    ]);
    await startCluster(bin, primaryDir, runAs);
    started.push(primaryDir);
    // -R writes primary_conninfo and standby.signal: the copy starts as a standby streaming from the primary.
    run(
      bin,
      'pg_basebackup',
      [
        '-h',
        '127.0.0.1',
        '-p',
        String(primaryPort),
        '-U',
        'postgres',
        '-D',
        standbyDir,
        '-R',
        '-X',
        'stream',
        '-c',
        'fast',
      ],
      runAs,
    );
    const standbyPort = await freePort();
    configure(standbyDir, root, standbyPort, ['hot_standby = on']);
    await startCluster(bin, standbyDir, runAs);
    started.push(standbyDir);
    const primaryUrl = `postgres://postgres@127.0.0.1:${primaryPort}/postgres`;
    const replicaUrl = `postgres://postgres@127.0.0.1:${standbyPort}/postgres`;
    await untilInRecovery(replicaUrl);
    return {
      primaryUrl,
      replicaUrl,
      pauseReplay: () => one(replicaUrl, 'select pg_wal_replay_pause()').then(() => undefined),
      resumeReplay: () => one(replicaUrl, 'select pg_wal_replay_resume()').then(() => undefined),
      caughtUp: (timeoutMs = 15_000) => caughtUp(primaryUrl, replicaUrl, timeoutMs),
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/** Appends this test's settings: its port, loopback only, its socket under the temp directory, small and fast. */
function configure(dataDir: string, socketDir: string, port: number, extra: readonly string[]): void {
  appendFileSync(
    join(dataDir, 'postgresql.conf'),
    [
      '',
      `port = ${port}`,
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${socketDir}'`,
      'fsync = off',
      'full_page_writes = off',
      'shared_buffers = 32MB',
      'max_connections = 60',
      ...extra,
      '',
    ].join('\n'),
  );
}

async function startCluster(bin: string, dataDir: string, runAs: RunAs | null): Promise<void> {
  // pg_ctl start -w returns once the server accepts connections (a standby: once it is consistent).
  await new Promise<void>((resolve, reject) => {
    const child = spawn(
      join(bin, 'pg_ctl'),
      ['start', '-D', dataDir, '-w', '-t', '60', '-l', join(dataDir, 'server.log')],
      { stdio: ['ignore', 'pipe', 'pipe'], ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}) },
    );
    let output = '';
    child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`pg_ctl start ${dataDir} exited with ${code}:\n${output}`)),
    );
  });
}

function run(bin: string, tool: string, args: readonly string[], runAs: RunAs | null): void {
  const r = spawnSync(join(bin, tool), args, {
    encoding: 'utf8',
    timeout: 120_000,
    ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
  });
  if (r.status !== 0) {
    const why = r.error?.message ?? (r.signal ? `signal ${r.signal}` : `exit code ${r.status}`);
    throw new Error(`${tool} ${args.join(' ')} failed (${why}):\n${r.stdout}${r.stderr}`);
  }
}

async function one(url: string, sql: string, params: unknown[] = []): Promise<Record<string, unknown>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows[0] as Record<string, unknown>;
  } finally {
    await client.end();
  }
}

async function untilInRecovery(url: string): Promise<void> {
  const row = await one(url, 'select pg_is_in_recovery() as standby');
  if (row.standby !== true) throw new Error(`the standby at ${url} is not in recovery`);
}

async function caughtUp(primaryUrl: string, replicaUrl: string, timeoutMs: number): Promise<void> {
  const target = (await one(primaryUrl, 'select pg_current_wal_insert_lsn()::text as lsn')).lsn as string;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const row = await one(
      replicaUrl,
      'select pg_wal_lsn_diff(pg_last_wal_replay_lsn(), $1::pg_lsn) >= 0 as done',
      [target],
    );
    if (row.done === true) return;
    if (Date.now() > deadline)
      throw new Error(`the standby did not replay up to ${target} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
