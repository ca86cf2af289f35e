import { request } from 'node:http';
import { Socket } from 'node:net';
import pg from 'pg';

// Where the tests' PostgreSQL comes from, in order: DATABASE_URL → a local server on 127.0.0.1:5432
// (skip with TEST_DB_LOCAL=0) → Testcontainers when a Docker daemon answers → the embedded launcher.

export interface ResolvedServer {
  url: string;
  source: 'env' | 'local' | 'testcontainers' | 'embedded';
  stop(): Promise<void>;
}

export async function resolveServer(): Promise<ResolvedServer> {
  const none = async () => {};
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL, source: 'env', stop: none };
  if (process.env.TEST_DB_LOCAL !== '0') {
    const url = process.env.LOCAL_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
    if ((await portOpen('127.0.0.1', 5432, 300)) && (await canLogin(url)))
      return { url, source: 'local', stop: none };
  }
  if (await dockerAnswers()) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:17-alpine').start();
    return {
      url: container.getConnectionUri(),
      source: 'testcontainers',
      stop: async () => void (await container.stop()),
    };
  }
  const { EmbeddedPostgres } = await import('../../src/embedded/launcher.js');
  const server = await EmbeddedPostgres.start();
  return { url: server.url, source: 'embedded', stop: () => server.destroy() };
}

function portOpen(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = new Socket();
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(timeoutMs, () => done(false));
    s.once('error', () => done(false));
    s.connect(port, host, () => done(true));
  });
}

async function canLogin(url: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
  try {
    await c.connect();
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

function dockerAnswers(): Promise<boolean> {
  if (process.env.DOCKER_HOST) return Promise.resolve(true);
  return new Promise((resolve) => {
    const req = request({ socketPath: '/var/run/docker.sock', path: '/_ping', timeout: 500 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.once('error', () => resolve(false));
    req.once('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.end();
  });
}
