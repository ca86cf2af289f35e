import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { post } from '../helpers/signed-post.js';
import { until } from '../helpers/wait.js';

// `awa serve` as its own process (node + tsx on src/cli/main.ts): it refuses to start without a secret, serves
// the receiver at POST /callbacks with the secret from the environment, and stops on SIGTERM; with dashboard
// credentials it serves the dashboard at /dashboard, and it refuses an open dashboard on a public address.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const SECRET = 'cli-serve-secret-0123456789abcdef';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase('cli_serve');
  const client = new AwaClient({ connectionString: db.url });
  await client.migrate();
  await client.close();
});
afterAll(async () => {
  await db?.drop();
});

function spawnAwa(args: readonly string[], env: Record<string, string | undefined>): ChildProcess {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
  return spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

function collect(child: ChildProcess): { out: () => string; exit: Promise<number | null> } {
  let text = '';
  child.stdout!.on('data', (d: Buffer) => (text += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (text += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return { out: () => text, exit };
}

describe('awa serve', () => {
  it('refuses to start without a callback secret', async () => {
    const run = collect(
      spawnAwa(['serve', '--port', '0'], {
        DATABASE_URL: db.url,
        AWA_CALLBACK_SECRET: undefined,
        AWA_DASHBOARD_TOKEN: undefined,
        AWA_DASHBOARD_USER: undefined,
        AWA_DASHBOARD_PASSWORD: undefined,
      }),
    );
    expect(await run.exit).toBe(2);
    expect(run.out()).toMatch(/no callback secret: set AWA_CALLBACK_SECRET/);
  });

  it('serves signed callbacks at /callbacks with the secret from the environment, and stops on SIGTERM', async () => {
    const child = spawnAwa(['serve', '--port', '0', '--host', '127.0.0.1'], {
      DATABASE_URL: db.url,
      AWA_CALLBACK_SECRET: SECRET,
    });
    const run = collect(child);
    const base = await until(
      'the server to listen',
      async () => /serving on (http:\/\/\S+):/.exec(run.out())?.[1],
    );
    const url = `${base}/callbacks`;
    const body = { token: randomUUID(), action: 'complete' };
    expect((await post(url, body)).status).toBe(401);
    // Authentic, but no attempt holds this token.
    expect(await post(url, body, { secret: SECRET })).toMatchObject({
      status: 409,
      json: { outcome: 'rejected' },
    });
    child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
  });

  it('serves the dashboard at /dashboard with AWA_DASHBOARD_TOKEN (and no callback receiver without a secret)', async () => {
    const token = 'cli-dashboard-token-0123456789';
    const child = spawnAwa(['serve', '--port', '0'], {
      DATABASE_URL: db.url,
      AWA_CALLBACK_SECRET: undefined,
      AWA_DASHBOARD_TOKEN: token,
    });
    const run = collect(child);
    const base = await until(
      'the server to listen',
      async () => /serving on (http:\/\/\S+):/.exec(run.out())?.[1],
    );
    expect(run.out()).toMatch(/dashboard http:\/\/\S+\/dashboard/);
    const api = `${base}/dashboard/api/queues`;
    expect((await fetch(api)).status).toBe(401);
    const ok = await fetch(api, { headers: { authorization: `Bearer ${token}` } });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ queues: [] });
    expect((await fetch(`${base}/callbacks`, { method: 'POST', body: '{}' })).status).toBe(404);
    child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
  });

  it('with --json, prints where it listens as one JSON line on stdout (port 0: the port it was given)', async () => {
    const child = spawnAwa(['serve', '--port', '0', '--json'], {
      DATABASE_URL: db.url,
      AWA_CALLBACK_SECRET: SECRET,
      AWA_DASHBOARD_TOKEN: undefined,
    });
    let stdout = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    const run = collect(child);
    const line = await until('the address on stdout', async () =>
      stdout.endsWith('\n') ? stdout : undefined,
    );
    const address = JSON.parse(line) as { url: string; host: string; port: number; callbacks: string | null };
    expect(address.port).toBeGreaterThan(0);
    expect(address).toEqual({
      url: `http://127.0.0.1:${address.port}`,
      host: '127.0.0.1',
      port: address.port,
      callbacks: `http://127.0.0.1:${address.port}/callbacks`,
      dashboard: null,
    });
    expect(line.split('\n')).toHaveLength(2);
    // It is the address: the receiver answers there.
    expect((await post(address.callbacks!, { token: randomUUID(), action: 'complete' })).status).toBe(401);
    child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
    expect(stdout).toBe(line);
  });

  it('checks the database at start: an unmigrated one exits 1 with AWA_SCHEMA_NOT_MIGRATED, serving nothing', async () => {
    const empty = await createTestDatabase('cli_serve_empty');
    try {
      const run = collect(
        spawnAwa(['serve', '--port', '0', '--json'], {
          DATABASE_URL: empty.url,
          AWA_CALLBACK_SECRET: SECRET,
        }),
      );
      expect(await run.exit).toBe(1);
      expect(run.out()).toMatch(
        /^awa serve: Schema "awa" is at version 0, .*Run `awa migrate`.*\[AWA_SCHEMA_NOT_MIGRATED\]\n$/,
      );
      expect(run.out()).not.toContain('serving on');
    } finally {
      await empty.drop();
    }
  });

  it('refuses --dashboard-open on a non-loopback address without --insecure, naming the field', async () => {
    const run = collect(
      spawnAwa(['serve', '--port', '0', '--host', '0.0.0.0', '--dashboard-open'], {
        DATABASE_URL: db.url,
        AWA_CALLBACK_SECRET: undefined,
      }),
    );
    expect(await run.exit).toBe(1);
    expect(run.out()).toMatch(/AWA_INVALID_CONFIG/);
    expect(run.out()).toMatch(/"auth".*not a loopback address/);
  });
});
