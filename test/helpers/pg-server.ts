import { request } from 'node:http';
import { Socket } from 'node:net';
import pg from 'pg';

// Where the test run's PostgreSQL comes from, first match wins: DATABASE_URL → a local server
// (LOCAL_PG_URL, default 127.0.0.1:5432; TEST_DB_LOCAL=0 skips it) → Testcontainers when a Docker
// daemon answers → our embedded launcher. Each probe fails fast, so falling through costs milliseconds.

export interface PgServer {
  url: string;
  /** Human-readable origin, for the one line the setup prints. */
  source: string;
  /** Stops the server if this run started it; a no-op for servers that were already there. */
  stop(): Promise<void>;
}

const LOCAL_DEFAULT = 'postgres://postgres@127.0.0.1:5432/postgres';
const nothingToStop = async (): Promise<void> => {};

export async function resolvePgServer(): Promise<PgServer> {
  const fromEnv = process.env.DATABASE_URL;
  if (fromEnv) return { url: fromEnv, source: 'DATABASE_URL', stop: nothingToStop };

  if (process.env.TEST_DB_LOCAL !== '0') {
    const url = process.env.LOCAL_PG_URL ?? LOCAL_DEFAULT;
    const { hostname, port } = new URL(url);
    if ((await tcpOpen(hostname, Number(port || 5432), 300)) && (await canCreateDatabases(url))) {
      return { url, source: `local server ${hostname}:${port || 5432}`, stop: nothingToStop };
    }
  }

  if (await dockerAnswers()) {
    // Imported only now: the import alone takes ~0.4 s and there is no point without a daemon.
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer(
      process.env.TEST_PG_IMAGE ?? 'postgres:17-alpine',
    ).start();
    return {
      url: container.getConnectionUri(),
      source: `Testcontainers (${container.getHost()}:${container.getPort()})`,
      stop: async () => {
        await container.stop();
      },
    };
  }

  const { EmbeddedPostgres } = await import('../../src/embedded/launcher.js');
  const server = await EmbeddedPostgres.start();
  return {
    url: server.url,
    source: `embedded PostgreSQL (port ${server.port})`,
    stop: () => server.destroy(),
  };
}

function tcpOpen(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (open: boolean) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.connect(port, host, () => done(true));
  });
}

/** A login that works but may not create databases is no use to the tests: fall through then. */
async function canCreateDatabases(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    const { rows } = await client.query<{ ok: boolean }>(
      'select rolsuper or rolcreatedb as ok from pg_roles where rolname = current_user',
    );
    return rows[0]?.ok === true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

function dockerAnswers(): Promise<boolean> {
  if (process.env.DOCKER_HOST) return Promise.resolve(true);
  return new Promise((resolve) => {
    const req = request({ socketPath: '/var/run/docker.sock', path: '/_ping', timeout: 500 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.once('timeout', () => req.destroy());
    req.once('error', () => resolve(false));
    req.once('close', () => resolve(false));
    req.end();
  });
}
