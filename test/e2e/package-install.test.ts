import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// The package as a user gets it: built, packed with `npm pack`, and installed from the tarball into an empty
// project with its production dependencies only (no tsx, no TypeScript, no bench peers). Then the installed
// `awa`, an ESM import of the public API and one of the test helpers (`awa-node/testing`, under node:test) must
// work. The build goes to a staging copy of the package, so the working tree's dist/ is never touched. The
// install fetches from npm's cache, or the registry when the cache lacks a package.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

describe('the package installed from its tarball', () => {
  let work: string;
  let app: string;
  let db: TestDatabase;
  const awaBin = () => join(app, 'node_modules', '.bin', 'awa');
  const awa = (args: string[], env: Record<string, string> = {}) =>
    run(awaBin(), args, {
      cwd: app,
      env: { ...process.env, DATABASE_URL: db.url, ...env },
      timeout: 120_000,
    });

  beforeAll(async () => {
    db = await createTestDatabase('package');
    work = mkdtempSync(join(tmpdir(), 'awa-package-'));
    const stage = join(work, 'stage');
    app = join(work, 'app');
    mkdirSync(app);
    for (const part of ['package.json', 'README.md', 'sql', 'bin', 'src/http/dashboard/assets'])
      cpSync(join(ROOT, part), join(stage, part), { recursive: true });
    await run(
      process.execPath,
      [
        join(ROOT, 'node_modules/typescript/bin/tsc'),
        '-p',
        'tsconfig.build.json',
        '--outDir',
        join(stage, 'dist'),
      ],
      {
        cwd: ROOT,
        timeout: 180_000,
      },
    );
    const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', work], { cwd: stage });
    const tarball = join(work, stdout.trim().split('\n').at(-1)!);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    await run(
      'npm',
      ['install', '--omit=dev', '--omit=optional', '--no-audit', '--no-fund', '--prefer-offline', tarball],
      { cwd: app, timeout: 300_000 },
    );
  }, 600_000);

  afterAll(async () => {
    await db?.drop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('installs without the development dependencies', async () => {
    const { stdout } = await run('npm', ['ls', '--all', '--parseable'], { cwd: app });
    for (const dev of ['tsx', 'typescript', 'vitest', 'graphile-worker', 'pg-boss', 'tinybench'])
      expect(stdout).not.toMatch(new RegExp(`node_modules/${dev}$`, 'm'));
    expect(stdout).toMatch(/node_modules\/awa-node$/m);
  });

  it('awa --help and awa migrate work', async () => {
    const help = await awa(['--help']);
    expect(help.stdout).toMatch(/^usage: awa <command>/);
    expect(help.stdout).toMatch(/awa migrate:/);
    const migrated = await awa(['migrate']);
    expect(migrated.stdout).toMatch(/^migrated schema "awa" from version 0 to \d+/);
  });

  it('the public API imports as ESM, and awa work runs a handler module that imports it, inline and in the thread pool', async () => {
    writeFileSync(
      join(app, 'jobs.js'),
      `import { defineHandler, defineJob } from 'awa-node';
export const greet = defineJob({ kind: 'greet', queue: 'packaged' });
export const crunch = defineJob({ kind: 'crunch', queue: 'packaged', execution: 'pool' });
export const handlers = [defineHandler(greet, async () => {}), defineHandler(crunch, async () => {})];
`,
    );
    writeFileSync(
      join(app, 'enqueue.js'),
      `import { AwaClient } from 'awa-node';
import { crunch, greet } from './jobs.js';
const client = new AwaClient({ connectionString: process.env.DATABASE_URL });
const { id } = await client.enqueue(greet, { to: 'you' });
const { id: pooled } = await client.enqueue(crunch, { n: 1 });
console.log(JSON.stringify({ id, pooled, state: (await client.getJob(id))?.state }));
await client.close();
`,
    );
    const enqueued = JSON.parse(
      (
        await run(process.execPath, ['enqueue.js'], {
          cwd: app,
          env: { ...process.env, DATABASE_URL: db.url },
        })
      ).stdout,
    );
    expect(enqueued.state).toBe('available');
    const worker = spawnIn(
      app,
      [awaBin(), 'work', '--handlers', './jobs.js', '--queue', 'packaged', '--no-maintenance'],
      db.url,
    );
    try {
      const { AwaClient } = await import('../../src/index.js');
      const client = new AwaClient({ connectionString: db.url });
      try {
        await until(
          'both jobs to complete, the pooled one in a worker thread',
          async () =>
            (await client.getJob(enqueued.id))?.state === 'completed' &&
            (await client.getJob(enqueued.pooled))?.state === 'completed',
          30_000,
        );
      } finally {
        await client.close();
      }
    } finally {
      expect(await stop(worker)).toEqual({ code: 0, signal: null });
    }
  });

  it('the testing helpers import from awa-node/testing, with their types, and a node:test file using them passes', async () => {
    expect(existsSync(join(app, 'node_modules/awa-node/dist/src/testing/index.d.ts'))).toBe(true);
    writeFileSync(
      join(app, 'signup.test.js'),
      `import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { defineHandler, defineJob } from 'awa-node';
import { drainQueue, expectEnqueued, expectNotEnqueued, runJob, useTestSchema } from 'awa-node/testing';
const welcome = defineJob({ kind: 'welcome', queue: 'mail' });
const sent = [];
const handler = defineHandler(welcome, async (job) => void sent.push(job.args.to));
const schema = useTestSchema({ setup: before, teardown: after });
it('enqueues in a transaction, and rollback leaves none', async () => {
  const t = schema();
  const tx = await t.client.pool.connect();
  await tx.query('begin');
  await t.client.enqueue(welcome, { to: 'ada' }, { client: tx });
  await expectEnqueued({ client: tx, schema: t.schema }, welcome, { args: { to: 'ada' } });
  await tx.query('rollback');
  tx.release();
  await expectNotEnqueued(t, welcome);
});
it('runs the handler, then drains the queue', async () => {
  assert.equal((await runJob(handler, welcome, { to: 'bob' }, { schema: schema() })).outcome, 'completed');
  await schema().client.enqueue(welcome, { to: 'cy' });
  assert.equal((await drainQueue(schema(), handler)).outcomes.completed, 1);
  assert.deepEqual(sent, ['bob', 'cy']);
});
`,
    );
    const { stdout } = await run(process.execPath, ['--test', '--test-reporter=tap', 'signup.test.js'], {
      cwd: app,
      env: { ...process.env, DATABASE_URL: db.url },
      timeout: 120_000,
    });
    expect(stdout).toMatch(/^# pass 2$/m);
    expect(stdout).toMatch(/^# fail 0$/m);
  });

  it('awa serve answers with the dashboard', async () => {
    const server = spawnIn(app, [awaBin(), 'serve', '--port', '0', '--json', '--dashboard-open'], db.url);
    try {
      const address = await firstJsonLine(server);
      const res = await fetch(`${address.url}/dashboard`);
      expect(res.status).toBe(200);
      expect(await res.text()).toMatch(/<html/i);
    } finally {
      expect(await stop(server)).toEqual({ code: 0, signal: null });
    }
  });

  it('awa bench runs Awa alone, and names the package a peer system needs', async () => {
    const drain = await awa(['bench', 'drain', '--system', 'awa', '--jobs', '1000', '--runs', '1']);
    expect(drain.stdout).toMatch(/^awa\s+1,000\s/m);
    const peer = await awa(['bench', 'drain', '--system', 'graphile', '--jobs', '1000', '--runs', '1']).then(
      () => null,
      (err: { code: number; stderr: string }) => err,
    );
    expect(peer?.code).toBe(2);
    expect(peer?.stderr).toMatch(/needs the package graphile-worker.*npm install graphile-worker/);
  });
});

function spawnIn(cwd: string, argv: string[], url: string): ChildProcess {
  const child = spawn(process.execPath, argv, {
    cwd,
    env: { ...process.env, DATABASE_URL: url },
    stdio: 'pipe',
  });
  child.stderr!.on('data', () => {});
  return child;
}

async function firstJsonLine(child: ChildProcess): Promise<{ url: string }> {
  let out = '';
  return await new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve(JSON.parse(line));
    });
    child.once('exit', (code) =>
      reject(new Error(`awa serve exited (${code}) before it printed its address`)),
    );
  });
}

/** SIGTERM, then its exit: a clean stop exits 0. */
async function stop(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null) return { code: child.exitCode, signal: child.signalCode };
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  child.kill('SIGTERM');
  return await exited;
}
