import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  defineJob,
  FailJob,
  WaitForCallback,
  WorkerHost,
  type QueueCounts,
} from '../../src/index.js';
import { runCli } from '../../src/cli/main.js';
import { settleAttempts, resolveSchema, ringStorage, rotateRing } from '../../src/storage/operations.js';
import { cliJob } from '../fixtures/cli-handlers.js';
import { claimBatches, settleAll } from '../helpers/claim.js';
import { LATEST_VERSION, MIGRATION_VERSIONS } from '../helpers/migrations.js';
import { createTestDatabase, serverUrl, type TestDatabase } from '../helpers/database.js';
import { completeJsonLines } from '../helpers/json-lines.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { until } from '../helpers/wait.js';

// The `awa` command end to end against a real database. Most commands run in-process through runCli (the
// function the `awa` binary calls) with their own environment and output collectors; a few run as real
// processes to check what only a process shows: exit codes and stdout of the binary, signals (`awa work`).
// Every test checks what the command printed, its exit code, and what it did to the database (read back
// through the public client or straight from the tables).

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const HANDLERS = fileURLToPath(new URL('../fixtures/cli-handlers.ts', import.meta.url));
const schema = resolveSchema();

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `awa <args>` in-process with `env` as its whole environment. */
async function awa(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(args, {
    env,
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
  });
  return { code, stdout, stderr };
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

/** Runs `awa <args>` as its own process, to completion. */
function awaProcess(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
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

/**
 * Rows of a human table, by column name. Columns are found from the header (names are separated by two
 * spaces or more and may hold single spaces) and each cell is read at its column's offset.
 */
function parseTable(text: string): Record<string, string>[] {
  const [header, ...lines] = text.replace(/\n+$/, '').split('\n');
  const starts: { name: string; at: number }[] = [];
  for (const m of header!.matchAll(/\S+(?: \S+)*/g)) starts.push({ name: m[0], at: m.index });
  return lines.map((line) =>
    Object.fromEntries(
      starts.map((c, i) => [c.name, line.slice(c.at, starts[i + 1]?.at ?? undefined).trim()]),
    ),
  );
}

/** The JSON a command printed (one document on stdout). */
function json<T = unknown>(r: Run): T {
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as T;
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
    expect(first).toEqual({
      code: 0,
      stdout: `migrated schema "awa" from version 0 to ${LATEST_VERSION}\n`,
      stderr: '',
    });
    const again = await awa(['migrate', '--database-url', fresh.url]);
    expect(again).toEqual({
      code: 0,
      stdout: `schema "awa" is up to date (version ${LATEST_VERSION})\n`,
      stderr: '',
    });
    // The database is fully migrated: the schema_version table lists every version, the library has nothing
    // left to apply, and the schema works.
    const client = new AwaClient({ connectionString: fresh.url, poolSize: 1 });
    try {
      const { rows } = await client.pool.query<{ version: number }>(
        'select version from awa.schema_version order by version',
      );
      expect(rows.map((r) => r.version)).toEqual(MIGRATION_VERSIONS);
      expect(await client.migrate()).toEqual({
        from: LATEST_VERSION,
        to: LATEST_VERSION,
        applied: [],
        functions: false,
      });
      const id = (await client.enqueue('k', {}, { queue: 'q' })).id;
      expect((await client.getJob(id))?.state).toBe('available');
    } finally {
      await client.close();
    }
  });

  it('fails with exit code 2 and a usage message when no database is given', async () => {
    const r = await awa(['migrate']);
    expect(r).toEqual({
      code: 2,
      stdout: '',
      stderr: 'awa migrate: no database: pass --database-url or set DATABASE_URL\n',
    });
  });
});

describe('bad input', () => {
  it('an unknown command exits 2, names it and prints the commands on stderr', async () => {
    const r = await awa(['nosuch']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^awa: unknown command "nosuch"\n/);
    expect(r.stderr).toContain('awa queue: queue list | show NAME');
  });

  it('no command at all exits 2 with the usage; --help exits 0 with it on stdout', async () => {
    const none = await awa([]);
    expect(none.code).toBe(2);
    expect(none.stdout).toBe('');
    expect(none.stderr).toMatch(/^usage: awa <command> \[options\]/);
    const help = await awa(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: awa <command> \[options\]/);
    const one = await awa(['dlq', '--help']);
    expect(one.code).toBe(0);
    expect(one.stdout).toMatch(/^awa dlq: dlq list/);
    expect(one.stdout).toContain('--older-than-ms <number>');
  });

  it('an unknown flag exits 2 naming the flag and the accepted ones', async () => {
    const r = await awa(['queue', 'list', '--colour'], { DATABASE_URL: 'postgres://unused/x' });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(
      /^awa queue: unknown option --colour \(accepted: --database-url, --schema, --json/,
    );
  });

  it('a flag without its value, or a number that is not one, exits 2 naming the flag', async () => {
    const env = { DATABASE_URL: 'postgres://unused/x' };
    expect(await awa(['dlq', 'list', '--limit'], env)).toEqual({
      code: 2,
      stdout: '',
      stderr: 'awa dlq: --limit needs a value\n',
    });
    expect(await awa(['dlq', 'list', '--limit', 'ten'], env)).toEqual({
      code: 2,
      stdout: '',
      stderr: 'awa dlq: --limit must be a number, got "ten"\n',
    });
  });

  it('a wrong DATABASE_URL exits 1 naming the server it could not reach', async () => {
    // Port 1 on the loopback: nothing listens there, so the connection is refused at once.
    const r = await awa(['queue', 'list'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nope' });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(
      /^awa queue: Cannot connect to PostgreSQL at postgres:\/\/postgres@127\.0\.0\.1:1\/nope: .*ECONNREFUSED.*\[AWA_CONNECTION_FAILED\]\n$/,
    );
  });

  it('a database that does not exist exits 1 naming it', async () => {
    const url = new URL(serverUrl());
    url.pathname = '/awa_cli_no_such_database';
    const r = await awa(['job', 'list', '--state', 'failed'], { DATABASE_URL: url.toString() });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('database "awa_cli_no_such_database" does not exist');
    expect(r.stderr).toMatch(/\[AWA_\w+\]\n$/);
  });

  it('a database never migrated: every command that reads exits 1 saying to run `awa migrate`', async () => {
    const empty = await createTestDatabase('cli_empty');
    const reads = [
      ['queues'],
      ['queue', 'list'],
      ['queue', 'show', 'q'],
      ['queue', 'pause', 'q'],
      ['queue', 'remove', 'q'],
      ['job', 'show', '1'],
      ['job', 'list', '--state', 'failed'],
      ['dlq', 'list'],
      ['runtime', 'list'],
      ['storage', 'status'],
      ['cron', 'list'],
      ['callback', 'complete', '00000000-0000-4000-8000-000000000000'],
    ];
    try {
      for (const argv of reads) {
        const r = await awa(argv, { DATABASE_URL: empty.url });
        expect({ argv, code: r.code, stdout: r.stdout }).toEqual({ argv, code: 1, stdout: '' });
        expect(r.stderr).toBe(
          `awa ${argv[0]}: Schema "awa" is at version 0, this build needs ${LATEST_VERSION}. ` +
            'Run `awa migrate` (or migrate()) first. [AWA_SCHEMA_NOT_MIGRATED]\n',
        );
      }
      // Nothing was created by the attempts.
      const c = new pg.Client({ connectionString: empty.url });
      await c.connect();
      try {
        const { rows } = await c.query("select to_regnamespace('awa') is not null as ok");
        expect(rows).toEqual([{ ok: false }]);
      } finally {
        await c.end();
      }
    } finally {
      await empty.drop();
    }
  });

  // Every verb with the positionals it takes, given one more: refused before any database is reached (the URL
  // names nothing that listens), exit 2, nothing on stdout.
  it.each([
    ['migrate', 'extra'],
    ['work', '--handlers', 'h.js', 'extra'],
    ['demo', 'extra'],
    ['bench', 'drain', 'extra'],
    ['serve', '--callback-secret', 's', 'extra'],
    ['queues', 'extra'],
    ['queue', 'list', 'extra'],
    ['queue', 'show', 'q', 'extra'],
    ['queue', 'pause', 'q', 'extra'],
    ['queue', 'resume', 'q', 'extra'],
    ['queue', 'shards', 'q', '2', 'extra'],
    ['queue', 'remove', 'q', 'extra'],
    ['job', 'show', '1', 'extra'],
    ['job', 'list', '5', '--state', 'failed'],
    ['job', 'cancel', '1', 'extra'],
    ['job', 'retry', '1', 'extra'],
    ['dlq', 'list', 'extra'],
    ['runtime', 'list', 'extra'],
    ['runtime', 'descriptors', 'extra'],
    ['storage', 'status', 'extra'],
    ['callback', 'complete', 'token', 'extra'],
    ['cron', 'list', 'extra'],
    ['cron', 'pause', 'name', 'extra'],
    ['cron', 'remove', 'name', 'extra'],
  ])('awa %s … with one argument too many exits 2', async (...argv: string[]) => {
    const r = await awa(argv, { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nope' });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(new RegExp(`^awa ${argv[0]}: (usage: |unexpected argument "extra")`));
  });
});

describe('operator commands', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let env: Record<string, string>;

  beforeAll(async () => {
    db = await createTestDatabase('cli_admin');
    client = new AwaClient({ connectionString: db.url, poolSize: 3 });
    await client.migrate();
    env = { DATABASE_URL: db.url };
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  /** One storage-level claim of `queue` (what a host's dispatcher does), returning the job ids claimed. */
  async function claimIds(queue: string): Promise<string[]> {
    const batches = await claimBatches(ringStorage(schema), client.pool, {
      queue,
      max: 100,
      instanceId: 'cli-test',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    return batches.flatMap((b) => b.jobs.map((j) => j.id));
  }

  describe('queue', () => {
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
      expect(json<QueueCounts[]>(await awa(['queues', '--json'], env))).toEqual(counts);
      const table = await awa(['queues'], env);
      expect(table.code).toBe(0);
      expect(parseTable(table.stdout)).toEqual(
        counts.map((c) => Object.fromEntries(Object.entries(c).map(([k, v]) => [k, String(v)]))),
      );
    });

    it('queue list shows every queue with its counts and state; queue show one of them', async () => {
      await client.enqueueMany([
        { kind: 'k', args: {}, options: { queue: 'cq_l1' } },
        { kind: 'k', args: {}, options: { queue: 'cq_l1' } },
        { kind: 'k', args: {}, options: { queue: 'cq_l1' } },
        { kind: 'k', args: {}, options: { queue: 'cq_l2', delayMs: 3_600_000 } },
      ]);
      const list = json<Record<string, unknown>[]>(await awa(['queue', 'list', '--json'], env));
      const l1 = list.find((q) => q.queue === 'cq_l1');
      expect(l1).toMatchObject({
        queue: 'cq_l1',
        paused: false,
        available: 3,
        running: 0,
        scheduled: 0,
        retryable: 0,
        completed: 0,
      });
      expect(typeof l1!.oldestAvailableAt).toBe('string');
      expect(list.find((q) => q.queue === 'cq_l2')).toMatchObject({ available: 0, scheduled: 1 });

      const table = await awa(['queue', 'list'], env);
      expect(table).toMatchObject({ code: 0, stderr: '' });
      const rows = parseTable(table.stdout);
      expect(rows.find((r) => r.queue === 'cq_l1')).toMatchObject({
        state: 'running',
        available: '3',
        scheduled: '0',
        'in oldest slot': 'no',
      });
      expect(rows.find((r) => r.queue === 'cq_l2')).toMatchObject({ available: '0', scheduled: '1' });

      const show = json<Record<string, unknown>>(await awa(['queue', 'show', 'cq_l1', '--json'], env));
      expect(show).toEqual(l1);
      const showTable = parseTable((await awa(['queue', 'show', 'cq_l2'], env)).stdout);
      expect(showTable.map((r) => [r.queue, r.scheduled])).toEqual([['cq_l2', '1']]);

      expect(await awa(['queue', 'show', 'cq_nope'], env)).toEqual({
        code: 1,
        stdout: '',
        stderr: 'queue cq_nope not found\n',
      });
      expect(await awa(['queue', 'show', 'cq_nope', '--json'], env)).toEqual({
        code: 1,
        stdout: 'null\n',
        stderr: 'queue cq_nope not found\n',
      });
    });

    it('queue pause stops claims of the queue in the database; resume lets them through again', async () => {
      const id = (await client.enqueue('k', {}, { queue: 'cq_p' })).id;
      const pausedAt = async () =>
        (
          await client.pool.query<{ paused_at: Date | null }>(
            'select paused_at from awa.queue_settings where queue = $1',
            ['cq_p'],
          )
        ).rows[0]?.paused_at;

      expect(await awa(['queue', 'pause', 'cq_p'], env)).toEqual({
        code: 0,
        stdout: 'paused cq_p\n',
        stderr: '',
      });
      expect(await pausedAt()).toBeInstanceOf(Date);
      expect(await claimIds('cq_p')).toEqual([]);
      expect((await client.getJob(id))?.state).toBe('available');
      expect(json(await awa(['queue', 'show', 'cq_p', '--json'], env))).toMatchObject({
        queue: 'cq_p',
        paused: true,
        available: 1,
      });
      expect(parseTable((await awa(['queue', 'show', 'cq_p'], env)).stdout)[0]).toMatchObject({
        state: 'paused',
      });
      // --json: the queue's state, and separately whether this call changed it.
      expect(json(await awa(['queue', 'pause', 'cq_p', '--json'], env))).toEqual({
        queue: 'cq_p',
        paused: true,
        changed: false,
      });

      expect(await awa(['queue', 'resume', 'cq_p'], env)).toEqual({
        code: 0,
        stdout: 'resumed cq_p\n',
        stderr: '',
      });
      expect(await pausedAt()).toBeNull();
      expect(await claimIds('cq_p')).toEqual([id]);
      expect(await awa(['queue', 'resume', 'cq_p'], env)).toEqual({
        code: 0,
        stdout: 'cq_p was already running\n',
        stderr: '',
      });
      expect(json(await awa(['queue', 'resume', 'cq_p', '--json'], env))).toEqual({
        queue: 'cq_p',
        paused: false,
        changed: false,
      });
      expect(json(await awa(['queue', 'pause', 'cq_p', '--json'], env))).toEqual({
        queue: 'cq_p',
        paused: true,
        changed: true,
      });
      expect(json(await awa(['queue', 'resume', 'cq_p', '--json'], env))).toEqual({
        queue: 'cq_p',
        paused: false,
        changed: true,
      });
    });

    it('queue pause of a queue nothing names is refused (no ghost); --create sets one up; queue remove deletes an empty one', async () => {
      const settings = async (queue: string) =>
        (await client.pool.query('select paused_at from awa.queue_settings where queue = $1', [queue])).rows;
      const listed = async () =>
        (await client.counts()).map((c) => c.queue).filter((q) => q.startsWith('cq_new'));
      for (const argv of [
        ['queue', 'pause', 'cq_new'],
        ['queue', 'resume', 'cq_new'],
        ['queue', 'shards', 'cq_new', '2'],
        ['queue', 'remove', 'cq_new'],
      ]) {
        const r = await awa(argv, env);
        expect({ argv, code: r.code, stdout: r.stdout }).toEqual({ argv, code: 1, stdout: '' });
        expect(r.stderr).toMatch(/^awa queue: No queue "cq_new": .*pass --create .*\[AWA_UNKNOWN_QUEUE\]\n$/);
      }
      expect(await settings('cq_new')).toEqual([]);
      expect(await listed()).toEqual([]);

      // A deploy pauses a new queue before its first job.
      expect(json(await awa(['queue', 'pause', 'cq_new', '--create', '--json'], env))).toEqual({
        queue: 'cq_new',
        paused: true,
        changed: true,
      });
      expect(await listed()).toEqual(['cq_new']);
      const id = (await client.enqueue('k', {}, { queue: 'cq_new' })).id;
      expect(await claimIds('cq_new')).toEqual([]);
      const busy = await awa(['queue', 'remove', 'cq_new'], env);
      expect(busy.code).toBe(1);
      expect(busy.stderr).toMatch(
        /^awa queue: Queue "cq_new" was not removed: it still holds jobs \(1 available\)\. .*\[AWA_QUEUE_IN_USE\]\n$/,
      );
      expect(await listed()).toEqual(['cq_new']);
      expect((await awa(['queue', 'resume', 'cq_new'], env)).code).toBe(0);
      const batches = await claimBatches(ringStorage(schema), client.pool, {
        queue: 'cq_new',
        max: 10,
        instanceId: 'cli-test',
        agingSeconds: 60,
        deadlineSeconds: 0,
      });
      expect(batches.flatMap((b) => b.jobs.map((j) => j.id))).toEqual([id]);
      await settleAttempts(client.pool, schema, settleAll(batches, 'completed'));

      expect(await awa(['queue', 'remove', 'cq_new'], env)).toEqual({
        code: 0,
        stdout: 'removed cq_new\n',
        stderr: '',
      });
      expect(await settings('cq_new')).toEqual([]);
      expect(await listed()).toEqual([]);
      expect((await awa(['queue', 'remove', 'cq_new'], env)).code).toBe(1);
      // --create only where it means something.
      expect(await awa(['queue', 'list', '--create'], env)).toEqual({
        code: 2,
        stdout: '',
        stderr: 'awa queue: --create applies to queue pause, resume, shards and changing limits\n',
      });
    });

    it('queue pause without a name exits 2 with the usage, touching nothing', async () => {
      expect(await awa(['queue', 'pause'], env)).toEqual({
        code: 2,
        stdout: '',
        stderr:
          'awa queue: usage: awa queue list | show NAME | pause NAME | resume NAME | shards NAME COUNT | remove NAME\n',
      });
      const { rows } = await client.pool.query(
        'select queue from awa.queue_settings where paused_at is not null',
      );
      expect(rows).toEqual([]);
    });

    it('queue shards splits a queue into enqueue shards and says what it was; a bad count exits 2', async () => {
      // A new queue: sharded before its first job, so --create.
      expect((await awa(['queue', 'shards', 'cq_s', '3'], env)).code).toBe(1);
      expect(await awa(['queue', 'shards', 'cq_s', '3', '--create'], env)).toEqual({
        code: 0,
        stdout: 'cq_s: 1 -> 3 enqueue shards\n',
        stderr: '',
      });
      expect(json(await awa(['queue', 'shards', 'cq_s', '2', '--json'], env))).toEqual({
        queue: 'cq_s',
        enqueueShards: 2,
        before: 3,
      });
      await client.enqueue('k', {}, { queue: 'cq_s' });
      expect(json(await awa(['queue', 'show', 'cq_s', '--json'], env))).toMatchObject({ enqueueShards: 2 });
      const bad = await awa(['queue', 'shards', 'cq_s', '0'], env);
      expect(bad).toEqual({
        code: 2,
        stdout: '',
        stderr: 'awa queue: shards: COUNT must be a whole number from 1 to 64, got "0"\n',
      });
      expect((await client.queueHealth()).find((q) => q.queue === 'cq_s')?.enqueueShards).toBe(2);
    });
  });

  describe('job', () => {
    it('job show prints a job (or says it is not found); job cancel cancels it once and claims skip it', async () => {
      const id = (await client.enqueue('k', { hello: 'cli' }, { queue: 'cq_job' })).id;
      const record = await client.getJob(id);

      expect(json(await awa(['job', 'show', id, '--json'], env))).toEqual(JSON.parse(JSON.stringify(record)));
      const plain = await awa(['job', 'show', id], env);
      expect(plain.code).toBe(0);
      expect(plain.stdout).toContain(`id: '${id}'`);
      expect(plain.stdout).toContain("state: 'available'");
      expect(plain.stdout).toContain("args: { hello: 'cli' }");
      // `job get` is show's old name.
      expect(json(await awa(['job', 'get', id, '--json'], env))).toEqual(JSON.parse(JSON.stringify(record)));
      expect(await awa(['job', 'show', '987654321'], env)).toEqual({
        code: 1,
        stdout: '',
        stderr: 'job 987654321 not found\n',
      });
      expect(await awa(['job', 'show', '987654321', '--json'], env)).toEqual({
        code: 1,
        stdout: 'null\n',
        stderr: 'job 987654321 not found\n',
      });
      expect(await awa(['job', 'show', 'abc'], env)).toEqual({
        code: 2,
        stdout: '',
        stderr: 'awa job: "abc" is not a job id (digits)\n',
      });

      expect(await awa(['job', 'cancel', id], env)).toEqual({
        code: 0,
        stdout: 'cancelled (was available)\n',
        stderr: '',
      });
      const job = await client.getJob(id);
      expect(job?.state).toBe('cancelled');
      expect(job?.meta?.errors?.map((e) => e.error)).toEqual(['cancelled by operator']);
      expect(await claimIds('cq_job')).toEqual([]);
      expect(await awa(['job', 'cancel', id, '--json'], env)).toEqual({
        code: 0,
        stdout: `${JSON.stringify({ id, cancelledFrom: null })}\n`,
        stderr: '',
      });
      expect((await client.getJob(id))?.state).toBe('cancelled');
    });

    it('job list filters by state, queue, kind and a time range, as a table and as JSON', async () => {
      const hour = 3_600_000;
      const t0 = Date.now();
      const ids = (
        await client.enqueueMany([
          { kind: 'cl_a', args: {}, options: { queue: 'cq_list', delayMs: 1 * hour } },
          { kind: 'cl_a', args: {}, options: { queue: 'cq_list', delayMs: 2 * hour } },
          { kind: 'cl_b', args: {}, options: { queue: 'cq_list', delayMs: 3 * hour } },
          { kind: 'cl_a', args: {}, options: { queue: 'cq_list_other', delayMs: 2 * hour } },
          { kind: 'cl_a', args: {}, options: { queue: 'cq_list' } },
        ])
      ).map((r) => r.id);
      const [in1h, in2h, in3h, other, now] = ids as [string, string, string, string, string];
      type Summary = { id: string; state: string; kind: string; queue: string; at: string };
      const list = async (...args: string[]) =>
        json<Summary[]>(await awa(['job', 'list', ...args, '--json'], env)).map((j) => j.id);

      expect(await list('--state', 'scheduled', '--queue', 'cq_list')).toEqual([in3h, in2h, in1h]);
      expect(await list('--state', 'scheduled', '--queue', 'cq_list', '--kind', 'cl_a')).toEqual([
        in2h,
        in1h,
      ]);
      expect(await list('--state', 'scheduled', '--kind', 'cl_a')).toEqual(
        expect.arrayContaining([other, in2h, in1h]),
      );
      expect(await list('--state', 'scheduled', '--kind', 'cl_b')).toEqual([in3h]);
      expect(await list('--state', 'available', '--queue', 'cq_list')).toEqual([now]);
      // The time range bounds the state's own time (run_at for scheduled jobs): [after, before).
      const iso = (ms: number) => new Date(t0 + ms).toISOString();
      expect(
        await list(
          '--state',
          'scheduled',
          '--queue',
          'cq_list',
          '--after',
          iso(1.5 * hour),
          '--before',
          iso(2.5 * hour),
        ),
      ).toEqual([in2h]);
      expect(await list('--state', 'scheduled', '--queue', 'cq_list', '--after', iso(1.5 * hour))).toEqual([
        in3h,
        in2h,
      ]);
      expect(await list('--state', 'scheduled', '--queue', 'cq_list', '--before', iso(1.5 * hour))).toEqual([
        in1h,
      ]);
      expect(await list('--state', 'available', '--queue', 'cq_list', '--after', iso(hour))).toEqual([]);
      expect(await list('--state', 'scheduled', '--queue', 'cq_list', '--limit', '1')).toEqual([in3h]);
      expect(await list('--state', 'scheduled', '--queue', 'cq_list', '--before-id', in3h)).toEqual([
        in2h,
        in1h,
      ]);

      const full = json<Summary[]>(
        await awa(['job', 'list', '--state', 'scheduled', '--queue', 'cq_list', '--json'], env),
      );
      expect(full[0]).toMatchObject({
        id: in3h,
        state: 'scheduled',
        kind: 'cl_b',
        queue: 'cq_list',
        attempt: 0,
      });
      expect(Math.abs(new Date(full[0]!.at).getTime() - (t0 + 3 * hour))).toBeLessThan(60_000);

      const table = await awa(['job', 'list', '--state', 'scheduled', '--queue', 'cq_list'], env);
      expect(table).toMatchObject({ code: 0, stderr: '' });
      expect(parseTable(table.stdout).map((r) => [r.id, r.state, r.kind, r.queue])).toEqual([
        [in3h, 'scheduled', 'cl_b', 'cq_list'],
        [in2h, 'scheduled', 'cl_a', 'cq_list'],
        [in1h, 'scheduled', 'cl_a', 'cq_list'],
      ]);
      expect(await awa(['job', 'list', '--state', 'failed', '--queue', 'cq_list'], env)).toEqual({
        code: 0,
        stdout: '(none)\n',
        stderr: '',
      });
    });

    it('job list rejects a missing or unknown state and a time that is not one (exit 2)', async () => {
      expect(await awa(['job', 'list'], env)).toMatchObject({
        code: 2,
        stdout: '',
        stderr: expect.stringMatching(/^awa job: job list needs --state \(available, scheduled, /) as unknown,
      });
      expect(await awa(['job', 'list', '--state', 'sleeping'], env)).toMatchObject({
        code: 2,
        stderr: expect.stringMatching(/^awa job: --state must be one of .*, got "sleeping"\n$/) as unknown,
      });
      expect(await awa(['job', 'list', '--state', 'failed', '--after', 'yesterday'], env)).toEqual({
        code: 2,
        stdout: '',
        stderr: 'awa job: --after is not a time: yesterday\n',
      });
      // Swapped bounds (after later than before, or equal): an empty window is a mistake, not "no jobs".
      for (const [after, before] of [
        ['2026-02-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z'],
        ['2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z'],
      ])
        expect(
          await awa(['job', 'list', '--state', 'failed', '--after', after!, '--before', before!], env),
        ).toEqual({
          code: 2,
          stdout: '',
          stderr: `awa job: --after (${after}) must be earlier than --before (${before})\n`,
        });
      expect(await awa(['job'], env)).toMatchObject({
        code: 2,
        stderr: expect.stringContaining('awa job: usage: awa job show <id>') as unknown,
      });
    });
  });

  describe('jobs that failed: job retry and the dlq', () => {
    const doomed = defineJob<{ n: number }>({ kind: 'cli_doomed', queue: 'cq_dlq', maxAttempts: 1 });
    const failing = defineJob<{ n: number }>({ kind: 'cli_failing', queue: 'cq_fail', maxAttempts: 1 });
    let ids: string[] = [];
    let failed = '';

    beforeAll(async () => {
      // Three jobs fail for good in a DLQ queue, one in a plain queue.
      const host = new WorkerHost({
        connectionString: db.url,
        queues: { cq_dlq: { concurrency: 3, dlq: true }, cq_fail: 1 },
        pollIntervalMs: 20,
        maintenance: false,
      });
      host.register(doomed, (j) => {
        throw new FailJob(`bad input ${j.args.n}`);
      });
      host.register(failing, () => {
        throw new FailJob('no such account');
      });
      ids = (await client.enqueueMany([1, 2, 3].map((n) => ({ kind: doomed, args: { n } })))).map(
        (r) => r.id,
      );
      failed = (await client.enqueue(failing, { n: 0 })).id;
      await host.start();
      try {
        await until('three DLQ entries and a failed job', async () => {
          const dlq = await client.listDlq({ queue: 'cq_dlq' });
          return dlq.length === 3 && (await client.getJob(failed))?.state === 'failed';
        });
      } finally {
        await host.stop();
      }
    });

    const dlqRows = async (): Promise<string[]> =>
      (
        await client.pool.query<{ job_id: string }>(
          "select job_id::text from awa.dlq_entries where queue = 'cq_dlq' order by job_id",
        )
      ).rows.map((r) => r.job_id);

    it('job list --state failed and --state dlq show them', async () => {
      const failedList = json<{ id: string; kind: string }[]>(
        await awa(['job', 'list', '--state', 'failed', '--queue', 'cq_fail', '--json'], env),
      );
      expect(failedList.map((j) => [j.id, j.kind])).toEqual([[failed, 'cli_failing']]);
      const dlqList = json<{ id: string }[]>(
        await awa(['job', 'list', '--state', 'dlq', '--kind', 'cli_doomed', '--json'], env),
      );
      expect(dlqList.map((j) => j.id)).toEqual([...ids].reverse());
    });

    it('job retry makes a failed job runnable again: a claim takes it', async () => {
      expect(await awa(['job', 'retry', failed], env)).toEqual({
        code: 0,
        stdout: 'retried (was failed)\n',
        stderr: '',
      });
      expect(await awa(['job', 'retry', '999999999'], env)).toEqual({
        code: 1,
        stdout: '',
        stderr: 'job 999999999 not retried: no such job (or its history passed retention)\n',
      });
      expect(await client.getJob(failed)).toMatchObject({ state: 'available', attempt: 0, queue: 'cq_fail' });
      expect(await claimIds('cq_fail')).toEqual([failed]);
      // Running now: nothing to retry (exit 1, the reason on stderr and in the JSON).
      const running = await awa(['job', 'retry', failed, '--json'], env);
      expect(running.code).toBe(1);
      expect(running.stderr).toBe(
        `job ${failed} not retried: it is running; only failed, cancelled, dead-lettered, scheduled or retryable jobs are retried\n`,
      );
      expect(JSON.parse(running.stdout)).toEqual({
        id: failed,
        retried: false,
        reason: 'not_retryable',
        state: 'running',
      });
    });

    it('dlq list prints the entries (as JSON with --json)', async () => {
      const entries = await client.listDlq({ queue: 'cq_dlq' });
      const listed = json<{ id: string; reason: string; attempt: number; maxAttempts: number }[]>(
        await awa(['dlq', 'list', '--queue', 'cq_dlq', '--json'], env),
      );
      expect(listed).toEqual(JSON.parse(JSON.stringify(entries)));
      expect(listed.map((e) => e.id).sort()).toEqual([...ids].sort());
      expect(listed.map((e) => [e.reason, e.attempt, e.maxAttempts]).sort()).toEqual([
        ['bad input 1', 1, 1],
        ['bad input 2', 1, 1],
        ['bad input 3', 1, 1],
      ]);
      expect(json<unknown[]>(await awa(['dlq', 'list', '--limit', '1', '--json'], env))).toHaveLength(1);
      expect(json(await awa(['dlq', 'list', '--queue', 'elsewhere', '--json'], env))).toEqual([]);
      const plain = await awa(['dlq', 'list'], env);
      expect(plain.code).toBe(0);
      const rows = parseTable(plain.stdout);
      expect(rows.map((r) => [r.id, r.queue, r.kind, r.attempt, r.reason]).sort()).toEqual(
        ids.map((id, i) => [id, 'cq_dlq', 'cli_doomed', '1/1', `bad input ${i + 1}`]).sort(),
      );
    });

    it('dlq retry moves an entry back to its queue with a fresh attempt counter', async () => {
      expect(await awa(['dlq', 'retry', ids[0]!], env)).toEqual({
        code: 0,
        stdout: 'retried 1\n',
        stderr: '',
      });
      expect(await client.getJob(ids[0]!)).toMatchObject({ state: 'available', attempt: 0, queue: 'cq_dlq' });
      expect(await dlqRows()).toEqual([ids[1], ids[2]]);
      expect(await claimIds('cq_dlq')).toEqual([ids[0]]);
      // Already moved: nothing to retry.
      expect(json(await awa(['dlq', 'retry', ids[0]!, '--json'], env))).toEqual({ retried: [] });
      expect(await awa(['dlq', 'retry'], env)).toMatchObject({
        code: 2,
        stderr:
          'awa dlq: usage: awa dlq list | awa dlq retry <id…> | awa dlq purge (<id…> | --older-than-ms N [--queue Q]) [--dry-run] [--yes]\n',
      });
    });

    it('dlq purge deletes entries by id, or by queue and age; with neither it exits 2', async () => {
      expect(await awa(['dlq', 'purge', ids[1]!], env)).toEqual({
        code: 0,
        stdout: 'purged 1\n',
        stderr: '',
      });
      expect(await dlqRows()).toEqual([ids[2]]);
      expect(await client.getJob(ids[1]!)).toBeNull();

      // Nothing in another queue, and nothing younger than an hour.
      expect(await awa(['dlq', 'purge', '--queue', 'elsewhere', '--older-than-ms', '1'], env)).toEqual({
        code: 0,
        stdout: 'purged 0\n',
        stderr: '',
      });
      expect(json(await awa(['dlq', 'purge', '--older-than-ms', '3600000', '--yes', '--json'], env))).toEqual(
        {
          purged: 0,
        },
      );
      // An age of zero or less would reach every entry: refused, nothing deleted.
      for (const age of ['0', '-5', '1.5'])
        expect(await awa(['dlq', 'purge', '--queue', 'cq_dlq', '--older-than-ms', age], env)).toMatchObject({
          code: 2,
          stderr: expect.stringContaining('--older-than-ms must be a whole number of milliseconds above 0'),
        });
      // Across every queue only with --yes; --dry-run says what would go and deletes nothing.
      expect(await awa(['dlq', 'purge', '--older-than-ms', '1'], env)).toMatchObject({
        code: 2,
        stderr: expect.stringContaining('add --yes to confirm'),
      });
      expect(await awa(['dlq', 'purge', '--older-than-ms', '1', '--dry-run'], env)).toEqual({
        code: 0,
        stdout: 'would purge 1 (dry run: nothing deleted)\n',
        stderr: '',
      });
      expect(await awa(['dlq', 'purge', 'abc'], env)).toMatchObject({ code: 2 });
      expect(await dlqRows()).toEqual([ids[2]]);
      expect(await awa(['dlq', 'purge', '--queue', 'cq_dlq', '--older-than-ms', '1'], env)).toEqual({
        code: 0,
        stdout: 'purged 1\n',
        stderr: '',
      });
      expect(await dlqRows()).toEqual([]);
      expect(await client.getJob(ids[2]!)).toBeNull();

      expect(await awa(['dlq', 'purge'], env)).toEqual({
        code: 2,
        stdout: '',
        stderr: 'awa dlq: dlq purge needs ids or --older-than-ms\n',
      });
    });
  });

  describe('runtime and storage', () => {
    it('runtime list shows a live host with its queues; once stopped, only --all shows it', async () => {
      const host = new WorkerHost({
        connectionString: db.url,
        queues: { cq_rt: 3, cq_rt2: 1 },
        maintenance: false,
      });
      await host.start();
      const instanceId = host.config.instanceId;
      type Instance = {
        instanceId: string;
        pid: number;
        concurrency: Record<string, number>;
        live: boolean;
        isLeader: boolean;
        inFlight: number;
        stoppedAt: string | null;
      };
      try {
        const live = json<Instance[]>(await awa(['runtime', 'list', '--json'], env));
        expect(live.filter((r) => r.instanceId === instanceId)).toEqual([
          expect.objectContaining({
            instanceId,
            pid: process.pid,
            concurrency: { cq_rt: 3, cq_rt2: 1 },
            live: true,
            isLeader: false,
            inFlight: 0,
            stoppedAt: null,
          }),
        ]);
        const table = await awa(['runtime', 'list'], env);
        expect(table).toMatchObject({ code: 0, stderr: '' });
        expect(parseTable(table.stdout).find((r) => r.instance === instanceId)).toMatchObject({
          leader: '',
          'in flight': '0',
          queues: 'cq_rt=3,cq_rt2=1',
          state: 'live',
        });
      } finally {
        await host.stop();
      }
      const { rows } = await client.pool.query<{ stopped_at: Date | null }>(
        'select stopped_at from awa.runtime_instances where instance_id = $1',
        [instanceId],
      );
      expect(rows[0]?.stopped_at).toBeInstanceOf(Date);
      const after = json<Instance[]>(await awa(['runtime', 'list', '--json'], env));
      expect(after.map((r) => r.instanceId)).not.toContain(instanceId);
      const all = json<Instance[]>(await awa(['runtime', 'list', '--all', '--json'], env));
      expect(all.find((r) => r.instanceId === instanceId)).toMatchObject({ live: false });
      expect(all.find((r) => r.instanceId === instanceId)!.stoppedAt).not.toBeNull();
      const allTable = parseTable((await awa(['runtime', 'list', '--all'], env)).stdout);
      expect(allTable.find((r) => r.instance === instanceId)).toMatchObject({ state: 'stopped' });
      expect(await awa(['runtime'], env)).toEqual({
        code: 2,
        stdout: '',
        stderr: 'awa runtime: usage: awa runtime list [--all] | awa runtime descriptors\n',
      });
    });

    it('storage status names the slot that holds the ring and what holds it', async () => {
      // A queue of its own, with one unclaimed job, sealed into an older slot: prune must wait for it.
      const id = (await client.enqueue('k', {}, { queue: 'cq_ring' })).id;
      expect(await rotateRing(client.pool, schema)).not.toBeNull();

      type Status = {
        ring: {
          slot: number;
          role: string;
          pinnedBy: string | null;
          unclaimed: number | null;
          queues: string[] | null;
        }[];
        tables: { family: string; partitions: number }[];
      };
      const status = json<Status>(await awa(['storage', 'status', '--json'], env));
      expect(status.ring.map((s) => s.role)).toEqual([
        ...status.ring.slice(0, -1).map(() => 'sealed'),
        'current',
      ]);
      const oldest = status.ring[0]!;
      expect(oldest.pinnedBy).toBe('unclaimed_ready_rows');
      expect(oldest.queues).toEqual(expect.arrayContaining(['cq_ring']));
      expect(oldest.unclaimed).toBeGreaterThanOrEqual(1);
      expect(status.tables.map((t) => t.family)).toEqual(
        expect.arrayContaining(['ready_entries', 'claim_batches']),
      );
      expect(JSON.parse(JSON.stringify(await client.ringStatus()))).toEqual(status.ring);

      const human = await awa(['storage', 'status'], env);
      expect(human).toMatchObject({ code: 0, stderr: '' });
      const lines = human.stdout.split('\n');
      expect(lines[0]).toBe('ring');
      expect(human.stdout).toMatch(
        new RegExp(
          `oldest sealed slot ${oldest.slot} is held by unclaimed_ready_rows \\(\\d+ unclaimed rows, \\d+ open receipts\\) of queues .*cq_ring`,
        ),
      );
      expect(lines).toContain('tables');
      const tablesAt = lines.indexOf('tables');
      const tableRows = parseTable(lines.slice(tablesAt + 1).join('\n'));
      expect(tableRows.find((r) => r.table === 'ready_entries')).toMatchObject({
        partitions: String(status.tables.find((t) => t.family === 'ready_entries')!.partitions),
      });

      expect(await claimIds('cq_ring')).toEqual([id]);
      expect(await awa(['storage'], env)).toEqual({
        code: 2,
        stdout: '',
        stderr: 'awa storage: usage: awa storage status\n',
      });
    });
  });

  describe('callback', () => {
    const kind = defineJob<{ n: number }>({ kind: 'cli_callback', queue: 'cq_cb', maxAttempts: 3 });
    let host: WorkerHost;
    const tokens = new Map<number, string>();
    const seen: { n: number; payload: unknown }[] = [];
    const ids: Record<number, string> = {};

    beforeAll(async () => {
      host = new WorkerHost({
        connectionString: db.url,
        queues: { cq_cb: 4 },
        pollIntervalMs: 20,
        maintenance: false,
      });
      host.register(kind, async (job, ctx) => {
        seen.push({ n: job.args.n, payload: job.callback?.payload });
        if (job.callback) return;
        tokens.set(job.args.n, await ctx.registerCallback());
        throw new WaitForCallback();
      });
      for (const n of [1, 2, 3]) ids[n] = (await client.enqueue(kind, { n })).id;
      await host.start();
      await until('three parked jobs', async () => {
        const states = await Promise.all([1, 2, 3].map(async (n) => (await client.getJob(ids[n]!))?.state));
        return states.every((s) => s === 'waiting_external');
      });
    });
    afterAll(async () => {
      await host?.stop();
    });

    it('callback complete settles the parked job with the payload as its result; the token then is rejected (exit 3)', async () => {
      const token = tokens.get(1)!;
      expect(await awa(['callback', 'complete', token, '--payload', '{"receipt":"r-1","n":1}'], env)).toEqual(
        {
          code: 0,
          stdout: `settled: job ${ids[1]}\n`,
          stderr: '',
        },
      );
      const job = await client.getJob(ids[1]!);
      expect(job).toMatchObject({ state: 'completed', attempt: 1 });
      expect((job?.meta as { result?: unknown }).result).toEqual({ receipt: 'r-1', n: 1 });
      expect(await awa(['callback', 'complete', token, '--json'], env)).toEqual({
        code: 3,
        stdout: `${JSON.stringify({ outcome: 'rejected', jobId: null })}\n`,
        stderr: '',
      });
      expect(await awa(['callback', 'complete', token], env)).toEqual({
        code: 3,
        stdout: 'rejected: no open attempt holds this token (unknown, used, or its attempt ended)\n',
        stderr: '',
      });
    });

    it('callback fail fails the job with the given error; resume runs the handler again with the payload', async () => {
      expect(
        json(
          await awa(
            ['callback', 'fail', tokens.get(2)!, '--error', 'card declined', '--payload', '[1,2]', '--json'],
            env,
          ),
        ),
      ).toEqual({ outcome: 'settled', jobId: ids[2] });
      const failedJob = await client.getJob(ids[2]!);
      expect(failedJob?.state).toBe('failed');
      expect(failedJob?.meta?.errors?.at(-1)?.error).toBe('card declined');

      expect(
        await awa(['callback', 'resume', tokens.get(3)!, '--payload', '{"approved":true}'], env),
      ).toEqual({
        code: 0,
        stdout: `settled: job ${ids[3]}\n`,
        stderr: '',
      });
      await until(
        'the resumed job to complete',
        async () => (await client.getJob(ids[3]!))?.state === 'completed',
      );
      expect(seen.filter((s) => s.n === 3)).toEqual([
        { n: 3, payload: undefined },
        { n: 3, payload: { approved: true } },
      ]);
    });

    it('bad input: --payload that is not JSON exits 2, a token that is not one exits 1, both naming the problem', async () => {
      const id = (await client.enqueue(kind, { n: 4 })).id;
      await until('the fourth job parked', async () => tokens.has(4));
      await until('parked', async () => (await client.getJob(id))?.state === 'waiting_external');
      const bad = await awa(['callback', 'complete', tokens.get(4)!, '--payload', '{receipt: 1}'], env);
      expect(bad.code).toBe(2);
      expect(bad.stdout).toBe('');
      expect(bad.stderr).toMatch(/^awa callback: --payload is not JSON: /);
      // Nothing was delivered.
      expect((await client.getJob(id))?.state).toBe('waiting_external');

      const notToken = await awa(['callback', 'complete', 'abc'], env);
      expect(notToken.code).toBe(1);
      expect(notToken.stderr).toContain('"token"');
      expect(notToken.stderr).toContain('must be a callback token (a UUID), got "abc"');
      expect(notToken.stderr).toMatch(/\[AWA_INVALID_OPTION\]\n$/);

      expect(await awa(['callback', 'settle', tokens.get(4)!], env)).toMatchObject({
        code: 2,
        stderr:
          'awa callback: usage: awa callback complete|fail|retry|cancel|resume TOKEN [--payload JSON] [--error TEXT] [--delay-ms N]\n',
      });
      expect((await client.getJob(id))?.state).toBe('waiting_external');
    });
  });
});

describe('the awa process', () => {
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

  it('as a process: prints JSON on stdout and exits 0; exits 2 on a usage error, the message on stderr', async () => {
    await client.enqueue('k', {}, { queue: 'proc_q' });
    const [ok, usage] = await Promise.all([
      awaProcess(['queue', 'show', 'proc_q', '--json'], { DATABASE_URL: db.url }),
      awaProcess(['queue', 'list', '--bogus'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nope' }),
    ]);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ queue: 'proc_q', available: 1, paused: false });
    expect(usage.code).toBe(2);
    expect(usage.stdout).toBe('');
    expect(usage.stderr).toMatch(/^awa queue: unknown option --bogus \(accepted: /);
  });

  it('work rejects a queue concurrency that is not a number, naming the field (exit 1)', async () => {
    const r = await awa(['work', '--handlers', HANDLERS, '--queue', 'cliq=lots'], { DATABASE_URL: db.url });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('Invalid option "queues.cliq.concurrency"');
    expect(r.stderr).toContain('[AWA_INVALID_OPTION]');
  });

  it('work drains jobs with the handlers of a module at the given concurrency; SIGTERM finishes the running job and exits 0', async () => {
    const log = join(logDir, 'work.jsonl');
    type Line = { event: 'start' | 'end'; id: string; n: number; t: number };
    const lines = (): Line[] => completeJsonLines<Line>(log);
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

    await until(
      'the first jobs to complete',
      async () => {
        const states = await Promise.all(first.map(async (id) => (await client.getJob(id))?.state));
        return states.every((s) => s === 'completed');
      },
      20_000,
      25,
    );
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
    await until(
      'the slow job to start',
      async () => lines().some((l) => l.id === slow && l.event === 'start'),
      20_000,
      25,
    );
    child.kill('SIGTERM');
    await until(
      'the worker to say it is stopping',
      async () => stderr.includes('[awa] stopping'),
      20_000,
      25,
    );
    const late = (await client.enqueue(cliJob, { n: 200 })).id;
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(stdout).toBe('');
    expect(stderr).not.toContain('maintenance leader');

    expect(await client.getJob(slow)).toMatchObject({ state: 'completed', attempt: 1 });
    // Never started: still available, or handed straight back (snoozed to now, no attempt spent) by a
    // claim that was already in flight when the worker began to stop.
    expect(await client.getJob(late)).toMatchObject({
      state: expect.stringMatching(/^(available|scheduled)$/),
      attempt: 0,
    });
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

  it('work stands for maintenance leadership by default: holds the leader lock until SIGTERM releases it', async () => {
    const worker = spawnAwa(['work', '--handlers', HANDLERS, '--queue', 'cliq=2'], { DATABASE_URL: db.url });
    child = worker;
    let stderr = '';
    worker.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => worker.once('exit', (code) => resolve(code)));
    await until(
      'the worker to become leader',
      async () => stderr.includes('[awa] became maintenance leader'),
      20_000,
      25,
    );
    const holders = await leaderLockHolders(client.pool);
    expect(holders.map((h) => h.applicationName)).toEqual(['awa-leader']);
    // It works its queue too.
    const id = (await client.enqueue(cliJob, { n: 1 })).id;
    await until(
      'the job to complete',
      async () => (await client.getJob(id))?.state === 'completed',
      20_000,
      25,
    );
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
