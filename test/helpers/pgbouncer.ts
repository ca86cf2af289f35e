import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';
import { serverUser } from '../../src/embedded/system-user.js';
import { serverUrl } from './database.js';
import { freePort } from './free-port.js';

// A PgBouncer of the test's own in front of the run's PostgreSQL: transaction pooling, a small server-side pool,
// on a free port, with a config directory under the temp dir that stop() removes. Every database of the server
// is reachable through it (a `*` entry), so a test points it at the database it created. Clients log in as the
// server URL's user under `trust` (the auth file names that user, and its password, which PgBouncer uses to log
// in to the server). No ignore_startup_parameters: pg sends only what PgBouncer tracks (application_name), and
// Awa must not need more. PgBouncer refuses to run as root: as root it runs as the embedded launcher's
// unprivileged user. It is a system package (apt-get install pgbouncer; .ci/run installs it): without it the
// tests that need it fail, saying so, rather than skip.

export interface PgBouncer {
  readonly port: number;
  /** Server connections per (database, user): PgBouncer's default_pool_size. */
  readonly poolSize: number;
  /** The same database as `directUrl`, through this PgBouncer. */
  via(directUrl: string): string;
  /** The rows of an admin console command (`SHOW POOLS`, `SHOW SERVERS`…). */
  show(command: string): Promise<Record<string, unknown>[]>;
  /** Stops the process (its clients' connections end) and removes its config directory. */
  stop(): Promise<void>;
}

const CANDIDATE_DIRS = ['/usr/sbin', '/usr/local/sbin', '/usr/local/bin', '/opt/homebrew/bin'];

/** Where the pgbouncer binary is: $PGBOUNCER_BIN, else $PATH and the usual sbin directories. */
export function findPgBouncer(): string {
  const fromEnv = process.env.PGBOUNCER_BIN;
  const candidates = fromEnv
    ? [fromEnv]
    : [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...CANDIDATE_DIRS].map((dir) =>
        join(dir, 'pgbouncer'),
      );
  const found = candidates.find((candidate) => {
    try {
      accessSync(candidate, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
  if (found) return found;
  throw new Error(
    `pgbouncer is missing${fromEnv ? ` (PGBOUNCER_BIN=${fromEnv} is not an executable)` : ''}, and the ` +
      'PgBouncer tests need it: install it (Debian/Ubuntu: apt-get install -y pgbouncer; macOS: brew install ' +
      'pgbouncer; .ci/run does it) or set PGBOUNCER_BIN to its path.',
  );
}

export async function startPgBouncer(options: { poolSize?: number } = {}): Promise<PgBouncer> {
  const bin = findPgBouncer();
  const poolSize = options.poolSize ?? 4;
  // A free port can be taken between our probe and PgBouncer's bind: try again on a new one.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return await launch(bin, port, poolSize);
    } catch (err) {
      if (attempt >= 3 || !/Address already in use/i.test((err as Error).message)) throw err;
    }
  }
}

async function launch(bin: string, port: number, poolSize: number): Promise<PgBouncer> {
  const server = new URL(serverUrl());
  const user = decodeURIComponent(server.username || 'postgres');
  const dir = mkdtempSync(join(tmpdir(), 'awa-pgbouncer-'));
  const ini = join(dir, 'pgbouncer.ini');
  const users = join(dir, 'userlist.txt');
  const quote = (s: string) => `"${s.replace(/"/g, '""')}"`;
  writeFileSync(users, `${quote(user)} ${quote(decodeURIComponent(server.password))}\n`, { mode: 0o600 });
  writeFileSync(
    ini,
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${users}`,
      `admin_users = ${user}`,
      'pool_mode = transaction',
      `default_pool_size = ${poolSize}`,
      'reserve_pool_size = 0',
      'max_client_conn = 1000',
      'log_connections = 0',
      'log_disconnections = 0',
      '',
    ].join('\n'),
    { mode: 0o600 },
  );
  const runAs = serverUser();
  if (runAs) for (const f of [dir, ini, users]) chownSync(f, runAs.uid, runAs.gid);
  const child = spawn(bin, [ini], {
    stdio: ['ignore', 'ignore', 'pipe'],
    ...(runAs ? { uid: runAs.uid, gid: runAs.gid } : {}),
  });
  try {
    await untilListening(child, port);
  } catch (err) {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const through = (database: string) =>
    `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
  return {
    port,
    poolSize,
    via: (directUrl) => through(decodeURIComponent(new URL(directUrl).pathname.slice(1))),
    show: async (command) => {
      const admin = new pg.Client({ connectionString: through('pgbouncer') });
      await admin.connect();
      try {
        return (await admin.query(command)).rows as Record<string, unknown>[];
      } finally {
        await admin.end();
      }
    },
    stop: async () => {
      await stopProcess(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Resolves once PgBouncer says it listens; rejects with what it printed if it exits first. */
function untilListening(child: ChildProcess, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(
      () => fail(new Error(`pgbouncer did not start within 10 s:\n${output}`)),
      10_000,
    );
    const fail = (err: Error) => {
      clearTimeout(timer);
      reject(err);
    };
    child.stderr!.on('data', (chunk: Buffer) => {
      // Read for as long as it runs (a full pipe would stall it); only the tail is kept, for a failure.
      output = (output + chunk.toString()).slice(-16_384);
      if (output.includes(`listening on 127.0.0.1:${port}`)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('error', (err) => fail(new Error(`pgbouncer could not be started: ${err.message}`)));
    child.once('exit', (code) =>
      fail(new Error(`pgbouncer exited with ${code} before listening:\n${output}`)),
    );
  });
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // SIGTERM: immediate shutdown (SIGINT would wait for every client to leave).
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
