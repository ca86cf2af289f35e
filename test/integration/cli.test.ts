import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, defineJob, FailJob, WorkerHost, type QueueCounts } from '../../src/index.js';
import { cliJob } from '../fixtures/cli-handlers.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';

// The `awa` command end to end: each command runs as its own process (node + tsx on src/cli/main.ts)
// against a real database. Every test checks what the command printed, its exit code, and what it did
// to the database (read back through the public client).

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const HANDLERS = fileURLToPath(new URL('../fixtures/cli-handlers.ts', import.meta.url));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function spawnAwa(args: readonly string[], env: Record<string, string> = {}): ChildProcess {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  if (!('DATABASE_URL' in env)) delete childEnv.DATABASE_URL;
  return spawn(process.execPath, ['--import', 'tsx', MAIN, ...args], {
    cwd: ROOT,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Runs `awa <args>` to completion. */
function awa(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  const child = spawnAwa(args, env);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 20_000) {
  const until = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}

/** Rows of the `awa queues` table, by column name. */
function parseTable(text: string): Record<string, string>[] {
  const [header, ...lines] = text.trim().split('\n');
  const cols = header!.trim().split(/\s+/);
  return lines.map((l) =>
    Object.fromEntries(
      l
        .trim()
        .split(/\s+/)
        .map((v, i) => [cols[i], v]),
    ),
  );
}

describe('awa migrate', () => {
  let fresh: TestDatabase;
  beforeAll(async () => {
    fresh = await createTestDatabase('cli_migrate');
  });
  afterAll(async () => {
    await fresh?.drop();
  });

  const schemaExists = async (name: string): Promise<boolean> => {
    const c = new pg.Client({ connectionString: fresh.url });
    await c.connect();
    try {
      const { rows } = await c.query<{ ok: boolean }>('select to_regnamespace($1) is not null as ok', [name]);
      return rows[0]!.ok;
    } finally {
      await c.end();
    }
  };

  it('--sql prints the migration SQL without touching the database', async () => {
    const r = await awa(['migrate', '--sql'], { DATABASE_URL: fresh.url });
    expect(r).toMatchObject({ code: 0, stderr: '' });
    const expected = new AwaClient({ connectionString: 'postgres://localhost/unused' }).migrationSql();
    expect(r.stdout).toBe(expected);
    expect(r.stdout).toContain('create schema if not exists "awa"');
    expect(await schemaExists('awa')).toBe(false);

    const other = await awa(['migrate', '--sql', '--schema', 'cli_alt']);
    expect(other.code).toBe(0);
    expect(other.stdout).toContain('create schema if not exists "cli_alt"');
    expect(other.stdout).not.toContain('"awa"');
  });

  it('applies the migrations, then finds nothing to do', async () => {
    const first = await awa(['migrate'], { DATABASE_URL: fresh.url });
    expect(first).toEqual({ code: 0, stdout: 'migrated schema "awa" from version 0 to 7\n', stderr: '' });
    const again = await awa(['migrate', '--database-url', fresh.url]);
    expect(again).toEqual({ code: 0, stdout: 'schema "awa" is up to date (version 7)\n', stderr: '' });
    // The database is fully migrated: the library has nothing left to apply, and the schema works.
    const client = new AwaClient({ connectionString: fresh.url, poolSize: 1 });
    try {
      expect(await client.migrate()).toEqual({ from: 7, to: 7, applied: [], functions: false });
      const id = (await client.enqueue('k', {}, { queue: 'q' })).id;
      expect((await client.getJob(id))?.state).toBe('available');
    } finally {
      await client.close();
    }
  });

  it('fails with exit code 2 and a usage message when no database is given', async () => {
    const r = await awa(['migrate']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('awa migrate: no database: pass --database-url or set DATABASE_URL');
  });
});

describe('operator commands', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let env: Record<string, string>;

  beforeAll(async () => {
    db = await createTestDatabase('cli_admin');
    client = new AwaClient({ connectionString: db.url, poolSize: 2 });
    await client.migrate();
    env = { DATABASE_URL: db.url };
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('queues prints the per-queue counts as a table, and as JSON with --json', async () => {
    await client.enqueueMany([
      { kind: 'k', args: {}, options: { queue: 'cq_a' } },
      { kind: 'k', args: {}, options: { queue: 'cq_a' } },
      { kind: 'k', args: {}, options: { queue: 'cq_b', delayMs: 3_600_000 } },
    ]);
    const counts = await client.counts();
    expect(counts.map((c) => [c.queue, c.available, c.scheduled])).toEqual([
      ['cq_a', 2, 0],
      ['cq_b', 0, 1],
    ]);

    const json = await awa(['queues', '--json'], env);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout) as QueueCounts[]).toEqual(counts);

    const table = await awa(['queues'], env);
    expect(table.code).toBe(0);
    expect(parseTable(table.stdout)).toEqual(
      counts.map((c) => Object.fromEntries(Object.entries(c).map(([k, v]) => [k, String(v)]))),
    );
  });

  it('job get prints a job (or says it is not found); job cancel cancels it once', async () => {
    const id = (await client.enqueue('k', { hello: 'cli' }, { queue: 'cq_job' })).id;
    const record = await client.getJob(id);

    const json = await awa(['job', 'get', id, '--json'], env);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual(JSON.parse(JSON.stringify(record)));
    const plain = await awa(['job', 'get', id], env);
    expect(plain.code).toBe(0);
    expect(plain.stdout).toContain(`id: '${id}'`);
    expect(plain.stdout).toContain("state: 'available'");
    expect(plain.stdout).toContain("args: { hello: 'cli' }");
    const missing = await awa(['job', 'get', '987654321'], env);
    expect(missing).toMatchObject({ code: 0, stdout: 'job 987654321 not found\n' });

    const cancel = await awa(['job', 'cancel', id], env);
    expect(cancel).toEqual({ code: 0, stdout: 'cancelled (was available)\n', stderr: '' });
    const job = await client.getJob(id);
    expect(job?.state).toBe('cancelled');
    expect(job?.meta?.errors?.map((e) => e.error)).toEqual(['cancelled by operator']);
    const again = await awa(['job', 'cancel', id], env);
    expect(again).toEqual({ code: 0, stdout: 'not cancelled: already finished or unknown\n', stderr: '' });
    expect((await client.getJob(id))?.state).toBe('cancelled');
  });

  it('job without a verb exits 2 with the usage; an unknown command too', async () => {
    const r = await awa(['job'], env);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('awa job: usage: awa job show <id>');
    const unknown = await awa(['nosuch'], env);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('awa: unknown command "nosuch"');
  });

  it('a database error exits 1 with its code: queues on a database never migrated', async () => {
    const empty = await createTestDatabase('cli_empty');
    try {
      const r = await awa(['queues'], { DATABASE_URL: empty.url });
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/^awa queues: counts failed: .*\[AWA_DATABASE_ERROR\]\n$/);
    } finally {
      await empty.drop();
    }
  });

  describe('dlq', () => {
    const doomed = defineJob<{ n: number }>({ kind: 'cli_doomed', queue: 'cq_dlq', maxAttempts: 1 });
    let ids: string[] = [];

    beforeAll(async () => {
      // Three jobs fail for good in a DLQ queue.
      const host = new WorkerHost({
        connectionString: db.url,
        queues: { cq_dlq: { concurrency: 3, dlq: true } },
        pollIntervalMs: 20,
        maintenance: false,
      });
      host.register(doomed, (j) => {
        throw new FailJob(`bad input ${j.args.n}`);
      });
      ids = (await client.enqueueMany([1, 2, 3].map((n) => ({ kind: doomed, args: { n } })))).map(
        (r) => r.id,
      );
      await host.start();
      try {
        await waitFor(
          'three DLQ entries',
          async () => (await client.listDlq({ queue: 'cq_dlq' })).length === 3,
        );
      } finally {
        await host.stop();
      }
    });

    it('dlq list prints the entries (as JSON with --json)', async () => {
      const entries = await client.listDlq({ queue: 'cq_dlq' });
      const json = await awa(['dlq', 'list', '--queue', 'cq_dlq', '--json'], env);
      expect(json.code).toBe(0);
      expect(JSON.parse(json.stdout)).toEqual(JSON.parse(JSON.stringify(entries)));
      expect((JSON.parse(json.stdout) as { id: string }[]).map((e) => e.id).sort()).toEqual([...ids].sort());
      const limited = await awa(['dlq', 'list', '--limit', '1', '--json'], env);
      expect(JSON.parse(limited.stdout)).toHaveLength(1);
      const plain = await awa(['dlq', 'list'], env);
      expect(plain.code).toBe(0);
      const rows = parseTable(plain.stdout.replace(/ \(/g, '_('));
      expect(rows.map((r) => r.id).sort()).toEqual([...ids].sort());
      expect(plain.stdout).toContain('bad input 1');
    });

    it('dlq retry moves an entry back to its queue with a fresh attempt counter', async () => {
      const r = await awa(['dlq', 'retry', ids[0]!], env);
      expect(r).toEqual({ code: 0, stdout: 'retried 1\n', stderr: '' });
      expect(await client.getJob(ids[0]!)).toMatchObject({ state: 'available', attempt: 0, queue: 'cq_dlq' });
      expect((await client.listDlq({ queue: 'cq_dlq' })).map((e) => e.id)).not.toContain(ids[0]);
      // Already moved: nothing to retry.
      expect(await awa(['dlq', 'retry', ids[0]!], env)).toMatchObject({ code: 0, stdout: 'retried 0\n' });
    });

    it('dlq purge removes entries by id, or by age; with neither it exits 2', async () => {
      const byId = await awa(['dlq', 'purge', ids[1]!], env);
      expect(byId).toEqual({ code: 0, stdout: 'purged 1\n', stderr: '' });
      expect(await client.getJob(ids[1]!)).toBeNull();
      expect((await client.listDlq({ queue: 'cq_dlq' })).map((e) => e.id)).toEqual([ids[2]]);

      // Nothing in another queue, and nothing younger than an hour.
      expect(await awa(['dlq', 'purge', '--queue', 'elsewhere', '--older-than-ms', '0'], env)).toMatchObject({
        code: 0,
        stdout: 'purged 0\n',
      });
      expect(await awa(['dlq', 'purge', '--older-than-ms', '3600000'], env)).toMatchObject({
        code: 0,
        stdout: 'purged 0\n',
      });
      expect(await client.listDlq({ queue: 'cq_dlq' })).toHaveLength(1);
      const byAge = await awa(['dlq', 'purge', '--queue', 'cq_dlq', '--older-than-ms', '0'], env);
      expect(byAge).toEqual({ code: 0, stdout: 'purged 1\n', stderr: '' });
      expect(await client.listDlq({ queue: 'cq_dlq' })).toEqual([]);
      expect(await client.getJob(ids[2]!)).toBeNull();

      const neither = await awa(['dlq', 'purge'], env);
      expect(neither.code).toBe(2);
      expect(neither.stderr).toContain('dlq purge needs ids or --older-than-ms');
    });
  });
});

describe('awa work', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let logDir: string;
  let child: ChildProcess | undefined;

  beforeAll(async () => {
    db = await createTestDatabase('cli_work');
    client = new AwaClient({ connectionString: db.url, poolSize: 2 });
    await client.migrate();
    logDir = mkdtempSync(join(tmpdir(), 'awa-cli-work-'));
  });
  afterAll(async () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await client?.close();
    await db?.drop();
    rmSync(logDir, { recursive: true, force: true });
  });

  it('rejects a queue concurrency that is not a number, naming the field (exit 1)', async () => {
    const r = await awa(['work', '--handlers', HANDLERS, '--queue', 'cliq=lots'], { DATABASE_URL: db.url });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('Invalid option "queues.cliq.concurrency"');
    expect(r.stderr).toContain('[AWA_INVALID_OPTION]');
  });

  it('drains jobs with the handlers of a module at the given concurrency; SIGTERM finishes the running job and exits 0', async () => {
    const log = join(logDir, 'work.jsonl');
    type Line = { event: 'start' | 'end'; id: string; n: number; t: number };
    const lines = (): Line[] =>
      existsSync(log)
        ? readFileSync(log, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as Line)
        : [];
    // Eight jobs of 400 ms at concurrency 5: the first five run together, the rest wait for a permit.
    const first = (
      await client.enqueueMany(
        Array.from({ length: 8 }, (_, n) => ({ kind: cliJob, args: { n, sleepMs: 400 } })),
      )
    ).map((r) => r.id);
    // --no-maintenance: with maintenance on, the default retention (0) lets the leader prune completed
    // history within seconds, and this test reads every outcome back afterwards.
    child = spawnAwa(['work', '--handlers', HANDLERS, '--queue', 'cliq=5', '--no-maintenance'], {
      DATABASE_URL: db.url,
      AWA_CLI_TEST_LOG: log,
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    let stdout = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child!.once('exit', (code, signal) => resolve({ code, signal })),
    );

    await waitFor('the first jobs to complete', async () => {
      const states = await Promise.all(first.map(async (id) => (await client.getJob(id))?.state));
      return states.every((s) => s === 'completed');
    });
    expect(stderr).toMatch(/\[awa\] worker \S+ serving cliq; Ctrl-C to stop/);
    // Never more than five at once, and five did run together.
    let running = 0;
    let peak = 0;
    for (const l of lines().sort((a, b) => a.t - b.t || (a.event === 'end' ? -1 : 1))) {
      running += l.event === 'start' ? 1 : -1;
      peak = Math.max(peak, running);
    }
    expect(peak).toBe(5);

    // A long job is running when SIGTERM arrives: the worker stops claiming, lets it finish, and exits.
    const slow = (await client.enqueue(cliJob, { n: 100, sleepMs: 1_500 })).id;
    await waitFor('the slow job to start', () => lines().some((l) => l.id === slow && l.event === 'start'));
    child.kill('SIGTERM');
    await waitFor('the worker to say it is stopping', () => stderr.includes('[awa] stopping'));
    const late = (await client.enqueue(cliJob, { n: 200 })).id;
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(stdout).toBe('');
    expect(stderr).not.toContain('maintenance leader');

    expect(await client.getJob(slow)).toMatchObject({ state: 'completed', attempt: 1 });
    expect(await client.getJob(late)).toMatchObject({ state: 'available', attempt: 0 });
    for (const id of first) expect(await client.getJob(id)).toMatchObject({ state: 'completed', attempt: 1 });
    // Every job ran exactly once, to its end; the late one never started.
    const all = lines();
    for (const id of [...first, slow]) {
      expect(all.filter((l) => l.id === id).map((l) => l.event)).toEqual(['start', 'end']);
    }
    expect(all.some((l) => l.id === late)).toBe(false);
    const slowEnd = all.find((l) => l.id === slow && l.event === 'end')!;
    expect(slowEnd.t).toBeGreaterThan(all.find((l) => l.id === slow && l.event === 'start')!.t + 1_000);
  }, 60_000);

  it('stands for maintenance leadership by default: holds the leader lock until SIGTERM releases it', async () => {
    const worker = spawnAwa(['work', '--handlers', HANDLERS, '--queue', 'cliq=2'], { DATABASE_URL: db.url });
    child = worker;
    let stderr = '';
    worker.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => worker.once('exit', (code) => resolve(code)));
    await waitFor('the worker to become leader', () => stderr.includes('[awa] became maintenance leader'));
    const holders = await leaderLockHolders(client.pool);
    expect(holders.map((h) => h.applicationName)).toEqual(['awa-leader']);
    // It works its queue too.
    const id = (await client.enqueue(cliJob, { n: 1 })).id;
    await waitFor('the job to complete', async () => (await client.getJob(id))?.state === 'completed');
    worker.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(stderr).toContain('[awa] gave up being maintenance leader');
    expect(await leaderLockHolders(client.pool)).toEqual([]);
    const { rows } = await client.pool.query('select 1 from pg_stat_activity where pid = $1', [
      holders[0]!.pid,
    ]);
    expect(rows).toEqual([]);
  }, 30_000);
});
