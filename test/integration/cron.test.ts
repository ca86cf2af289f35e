import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  defineCron,
  defineJob,
  InvalidOptionError,
  WorkerHost,
  type CronDefinition,
  type CronFire,
  type WorkerOptions,
} from '../../src/index.js';
import { syncCronDefinitions } from '../../src/host/cron-sync.js';
import { CronEvaluator } from '../../src/maintenance/cron.js';
import { ringStorage } from '../../src/storage/operations.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Cron against a real database: a host's sync and the undeclared report; the leader's evaluation with fixed
// clocks (DST days, missed-fire policies after downtime, unique schedules); the fire function's own checks
// (a pause that lands between evaluation and enqueue, a row someone else holds, a fire time already
// handled); pause, resume, trigger and list through the client and the `awa cron` command; and a live host
// firing a per-second schedule.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

let f: StorageFixture;
const hosts: WorkerHost[] = [];
let seq = 0;

beforeAll(async () => {
  f = await storageFixture('cron');
});
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.stop()));
  // Each test evaluates every schedule in the database: start the next one with none.
  await f.pool.query('delete from awa.cron_declarations; delete from awa.cron_jobs');
});
afterAll(async () => {
  await f?.close();
});

const at = (iso: string) => new Date(iso);

/** Stores schedules as a host would, declared by an instance that does not run. */
async function declare(...defs: CronDefinition[]): Promise<void> {
  const c = await f.pool.connect();
  try {
    await syncCronDefinitions(c, ringStorage(f.schema), `test-${++seq}`, defs, 30_000);
  } finally {
    c.release();
  }
}

async function setRow(name: string, set: string, values: unknown[] = []): Promise<void> {
  await f.pool.query(`update awa.cron_jobs set ${set} where name = $1`, [name, ...values]);
}

async function row(
  name: string,
): Promise<{ last_fire_at: Date | null; last_job_id: string | null; hash: string }> {
  const { rows } = await f.pool.query(
    'select last_fire_at, last_job_id::text, hash from awa.cron_jobs where name = $1',
    [name],
  );
  return rows[0];
}

interface JobMeta {
  cron: { name: string; fireAt?: string; manual?: boolean; triggeredAt?: string };
  unique?: { key: string };
}

/** Jobs of a kind still waiting in the ring (no test host serves these queues), oldest first. */
async function jobsOf(kind: string): Promise<{ id: string; meta: JobMeta }[]> {
  const { rows } = await f.pool.query(
    'select job_id::text as id, meta from awa.ready_entries where kind = $1 order by job_id',
    [kind],
  );
  return rows;
}

const evaluator = (missedAfterMs = 10_000) => {
  const errors: unknown[] = [];
  const ev = new CronEvaluator(ringStorage(f.schema).maintenance, missedAfterMs, (e) => errors.push(e));
  return {
    errors,
    tick: async (now: string) =>
      (await ev.tick(f.pool, at(now))).map((x: CronFire) => `${x.outcome} ${x.fireAt.toISOString()}`),
  };
};

describe('the leader evaluates schedules (fixed clocks, real database)', () => {
  it('a daily 02:30 in Europe/Berlin fires once on the spring-forward day (at 03:00 CEST) and once on the fall-back day', async () => {
    await declare(
      defineCron({
        name: 'dst',
        cron: '30 2 * * *',
        timezone: 'Europe/Berlin',
        kind: 'dst_job',
        args: { a: 1 },
      }),
    );
    const ev = evaluator();
    await setRow('dst', `last_fire_at = '2025-03-29T01:30:00Z'`);
    expect(await ev.tick('2025-03-30T00:59:59Z')).toEqual([]);
    expect(await ev.tick('2025-03-30T01:00:02Z')).toEqual(['fired 2025-03-30T01:00:00.000Z']);
    expect(await ev.tick('2025-03-30T01:30:00Z')).toEqual([]);
    expect(await ev.tick('2025-03-31T00:30:01Z')).toEqual(['fired 2025-03-31T00:30:00.000Z']);

    await setRow('dst', `last_fire_at = '2025-10-25T00:30:00Z'`);
    expect(await ev.tick('2025-10-26T00:30:03Z')).toEqual(['fired 2025-10-26T00:30:00.000Z']);
    expect(await ev.tick('2025-10-26T01:30:03Z')).toEqual([]); // the second 02:30 (CET)
    expect(await ev.tick('2025-10-27T01:30:01Z')).toEqual(['fired 2025-10-27T01:30:00.000Z']);

    const jobs = await jobsOf('dst_job');
    expect(jobs.map((j) => j.meta.cron)).toEqual([
      { name: 'dst', fireAt: '2025-03-30T01:00:00.000Z' },
      { name: 'dst', fireAt: '2025-03-31T00:30:00.000Z' },
      { name: 'dst', fireAt: '2025-10-26T00:30:00.000Z' },
      { name: 'dst', fireAt: '2025-10-27T01:30:00.000Z' },
    ]);
    const r = await row('dst');
    expect(r.last_fire_at).toEqual(at('2025-10-27T01:30:00Z'));
    expect(r.last_job_id).toBe(jobs.at(-1)!.id);
    expect(ev.errors).toEqual([]);
  });

  it("after downtime, 'latest' fires the latest missed occurrence once and 'skip' records it without a job", async () => {
    await declare(
      defineCron({ name: 'dl-latest', cron: '0 3 * * *', kind: 'dl_latest', args: {}, missedFire: 'latest' }),
      defineCron({ name: 'dl-skip', cron: '0 3 * * *', kind: 'dl_skip', args: {}, missedFire: 'skip' }),
    );
    for (const n of ['dl-latest', 'dl-skip']) await setRow(n, `last_fire_at = '2025-01-01T03:00:00Z'`);
    const ev = evaluator();
    // Down until 5 January 12:00: four occurrences missed.
    expect((await ev.tick('2025-01-05T12:00:00Z')).sort()).toEqual([
      'fired 2025-01-05T03:00:00.000Z',
      'skipped 2025-01-05T03:00:00.000Z',
    ]);
    expect(await ev.tick('2025-01-05T12:00:01Z')).toEqual([]);
    const latest = await jobsOf('dl_latest');
    expect(latest.map((j) => j.meta.cron.fireAt)).toEqual(['2025-01-05T03:00:00.000Z']);
    expect(await jobsOf('dl_skip')).toEqual([]);
    const skipped = await row('dl-skip');
    expect(skipped.last_fire_at).toEqual(at('2025-01-05T03:00:00Z'));
    expect(skipped.last_job_id).toBeNull();
    // The next occurrence is on time for both.
    expect((await ev.tick('2025-01-06T03:00:04Z')).sort()).toEqual([
      'fired 2025-01-06T03:00:00.000Z',
      'fired 2025-01-06T03:00:00.000Z',
    ]);
    expect((await jobsOf('dl_skip')).map((j) => j.meta.cron.fireAt)).toEqual(['2025-01-06T03:00:00.000Z']);
  });

  it('a per-second schedule fires each on-time second once, whatever the tick timing', async () => {
    await declare(defineCron({ name: 'sec', cron: '* * * * * *', kind: 'sec_job', args: {} }));
    await setRow('sec', `last_fire_at = '2025-02-01T00:00:00Z'`);
    const ev = evaluator();
    expect(await ev.tick('2025-02-01T00:00:02.400Z')).toEqual([
      'fired 2025-02-01T00:00:01.000Z',
      'fired 2025-02-01T00:00:02.000Z',
    ]);
    expect(await ev.tick('2025-02-01T00:00:02.900Z')).toEqual([]);
    expect(await ev.tick('2025-02-01T00:00:03.100Z')).toEqual(['fired 2025-02-01T00:00:03.000Z']);
    expect((await jobsOf('sec_job')).length).toBe(3);
  });

  it('a unique schedule: a fire whose key is held enqueues nothing and records the holder', async () => {
    await declare(
      defineCron({
        name: 'uniq',
        cron: '0 * * * *',
        kind: 'uniq_job',
        args: { x: 1 },
        options: { unique: true },
      }),
    );
    await setRow('uniq', `last_fire_at = '2025-02-01T00:00:00Z'`);
    const ev = evaluator();
    expect(await ev.tick('2025-02-01T01:00:01Z')).toEqual(['fired 2025-02-01T01:00:00.000Z']);
    const [first] = await jobsOf('uniq_job');
    expect(first!.meta.unique!.key).toMatch(/^[0-9a-f]{64}$/);
    // The first job still waits (nobody serves its queue): the next fire is a duplicate.
    expect(await ev.tick('2025-02-01T02:00:01Z')).toEqual(['duplicate 2025-02-01T02:00:00.000Z']);
    expect(await jobsOf('uniq_job')).toHaveLength(1);
    const r = await row('uniq');
    expect(r.last_fire_at).toEqual(at('2025-02-01T02:00:00Z'));
    expect(r.last_job_id).toBe(first!.id);
  });

  it('a schedule whose definition changed between evaluation and fire is left for the next tick', async () => {
    await declare(defineCron({ name: 'chg', cron: '0 * * * *', kind: 'chg_job', args: {} }));
    await setRow('chg', `last_fire_at = '2025-02-01T00:00:00Z'`);
    const hash = (await row('chg')).hash;
    const fire = await fireSql('chg', '2025-02-01T01:00:00Z', 'not-the-hash');
    expect(fire).toEqual({ outcome: 'changed', job_id: null });
    expect(await fireSql('chg', '2025-02-01T01:00:00Z', hash)).toMatchObject({ outcome: 'fired' });
  });
});

async function fireSql(
  name: string,
  fireAt: string,
  hash: string,
  db: pg.Pool | pg.PoolClient = f.pool,
): Promise<{ outcome: string; job_id: string | null }> {
  const { rows } = await db.query('select outcome, job_id::text from awa.cron_fire($1, $2, $3, true, null)', [
    name,
    fireAt,
    hash,
  ]);
  return rows[0];
}

describe('cron_fire: the checks under the row lock', () => {
  it('a pause that lands between evaluation and enqueue wins: the fire enqueues nothing', async () => {
    await declare(defineCron({ name: 'race', cron: '*/5 * * * *', kind: 'race_job', args: {} }));
    await setRow('race', `last_fire_at = '2025-02-01T00:00:00Z'`);
    const { hash } = await row('race');
    // The leader evaluated (00:05 is due), then an operator paused, then the fire runs.
    expect(await f.client.pauseCron('race')).toBe(true);
    expect(await fireSql('race', '2025-02-01T00:05:00Z', hash)).toEqual({ outcome: 'paused', job_id: null });
    expect(await jobsOf('race_job')).toEqual([]);
    expect((await row('race')).last_fire_at).toEqual(at('2025-02-01T00:00:00Z'));
    // The leader itself fires nothing of a paused schedule either.
    expect(await evaluator().tick('2025-02-01T00:05:01Z')).toEqual([]);
  });

  it('never waits for a row someone else holds ("busy"), and a fire time is enqueued at most once', async () => {
    await declare(defineCron({ name: 'once', cron: '*/5 * * * *', kind: 'once_job', args: {} }));
    await setRow('once', `last_fire_at = '2025-02-01T00:00:00Z'`);
    const { hash } = await row('once');
    const holder = await f.pool.connect();
    try {
      await holder.query('begin');
      await holder.query(`select 1 from awa.cron_jobs where name = 'once' for update`);
      // The holder keeps the row locked until after this call, so a fire that waited for it would never
      // return: an answer at all is the proof it did not wait.
      expect(await fireSql('once', '2025-02-01T00:05:00Z', hash)).toEqual({ outcome: 'busy', job_id: null });
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    const fired = await fireSql('once', '2025-02-01T00:05:00Z', hash);
    expect(fired.outcome).toBe('fired');
    // The same fire time again (a second leader, a retry after a lost answer), or an earlier one: nothing.
    expect(await fireSql('once', '2025-02-01T00:05:00Z', hash)).toEqual({ outcome: 'stale', job_id: null });
    expect(await fireSql('once', '2025-02-01T00:04:00Z', hash)).toEqual({ outcome: 'stale', job_id: null });
    expect(await fireSql('nope', '2025-02-01T00:05:00Z', hash)).toEqual({ outcome: 'missing', job_id: null });
    expect((await jobsOf('once_job')).map((j) => j.id)).toEqual([fired.job_id]);
  });

  it('a fire rolled back with its transaction leaves neither a job nor a fire record', async () => {
    await declare(defineCron({ name: 'rb', cron: '*/5 * * * *', kind: 'rb_job', args: {} }));
    await setRow('rb', `last_fire_at = '2025-02-01T00:00:00Z'`);
    const { hash } = await row('rb');
    const c = await f.pool.connect();
    try {
      await c.query('begin');
      expect((await fireSql('rb', '2025-02-01T00:05:00Z', hash, c)).outcome).toBe('fired');
      await c.query('rollback');
    } finally {
      c.release();
    }
    expect(await jobsOf('rb_job')).toEqual([]);
    expect((await row('rb')).last_fire_at).toEqual(at('2025-02-01T00:00:00Z'));
    expect((await fireSql('rb', '2025-02-01T00:05:00Z', hash)).outcome).toBe('fired');
  });
});

describe('operators: list, pause, resume, trigger, remove', () => {
  it('pause stops fires, resume does not catch up what fell due while paused, trigger enqueues one job now', async () => {
    await declare(
      defineCron({
        name: 'ops',
        cron: '0 3 * * *',
        kind: 'ops_job',
        args: { n: 7 },
        options: { queue: 'ops_q', priority: 3, metadata: { owner: 'me' }, tags: ['nightly'] },
      }),
    );
    await setRow('ops', `last_fire_at = now() - interval '3 days'`);
    let [s] = (await f.client.listCron()).filter((x) => x.name === 'ops');
    expect(s).toMatchObject({
      cron: '0 3 * * *',
      timezone: 'UTC',
      kind: 'ops_job',
      queue: 'ops_q',
      priority: 3,
      args: { n: 7 },
      paused: false,
      missedFire: 'latest',
      metadata: { owner: 'me' },
      tags: ['nightly'],
    });
    expect(s!.nextFireAt!.getTime()).toBeGreaterThan(Date.now() - 5_000);
    expect(s!.nextFireAt!.toISOString()).toMatch(/T03:00:00\.000Z$/);

    expect(await f.client.pauseCron('ops')).toBe(true);
    expect(await f.client.pauseCron('ops')).toBe(false);
    [s] = (await f.client.listCron()).filter((x) => x.name === 'ops');
    expect(s).toMatchObject({ paused: true, nextFireAt: null });
    expect(await evaluator().tick(new Date().toISOString())).toEqual([]);

    // Triggering works while paused and leaves the fire record alone.
    const before = await row('ops');
    const t = await f.client.triggerCron('ops');
    expect(t.inserted).toBe(true);
    const job = await f.client.getJob(t.id);
    expect(job).toMatchObject({
      kind: 'ops_job',
      queue: 'ops_q',
      priority: 3,
      args: { n: 7 },
      state: 'available',
    });
    expect(job!.meta).toMatchObject({ metadata: { owner: 'me' }, tags: ['nightly'] });
    expect((job!.meta as unknown as JobMeta).cron).toMatchObject({ name: 'ops', manual: true });
    expect(Date.parse((job!.meta as unknown as JobMeta).cron.triggeredAt!)).toBeGreaterThan(
      Date.now() - 60_000,
    );
    expect(await row('ops')).toEqual(before);

    // Without the pause the leader would fire the latest of the three missed days now; after resume it
    // waits for the next 03:00.
    expect(await f.client.resumeCron('ops')).toBe(true);
    expect(await f.client.resumeCron('ops')).toBe(false);
    expect(await evaluator().tick(new Date().toISOString())).toEqual([]);
    [s] = (await f.client.listCron()).filter((x) => x.name === 'ops');
    expect(s!.paused).toBe(false);
    expect(s!.nextFireAt!.getTime()).toBeGreaterThan(Date.now() - 5_000);
    expect((await jobsOf('ops_job')).map((j) => j.id)).toEqual([t.id]);

    const unknown = await f.client.pauseCron('no-such').catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(InvalidOptionError);
    expect((unknown as InvalidOptionError).field).toBe('name');
    await expect(f.client.triggerCron('no-such')).rejects.toBeInstanceOf(InvalidOptionError);
    expect(await f.client.removeCron('ops')).toBe(true);
    expect(await f.client.removeCron('ops')).toBe(false);
    expect((await f.client.listCron()).some((x) => x.name === 'ops')).toBe(false);
  });

  it('a host syncs its schedules at start; one no live host declares is reported undeclared, not deleted', async () => {
    const kind = defineJob({ kind: 'sync_job', queue: 'sync_q' });
    const a = defineCron({ name: 'sync-a', cron: '0 0 1 1 *', kind, args: {} });
    const b = defineCron({ name: 'sync-b', cron: '0 0 1 1 *', kind, args: {} });
    const opts: Partial<WorkerOptions> = {
      maintenance: false,
      queues: { sync_q: 1 },
      heartbeatIntervalMs: 200,
    };
    const h1 = new WorkerHost({ connectionString: f.url, instanceId: 'host-1', cron: [a, b], ...opts });
    hosts.push(h1);
    await h1.start();
    const mine = async () =>
      new Map((await f.client.listCron({ stalenessMs: 5_000 })).map((s) => [s.name, s]));
    let list = await mine();
    expect(list.get('sync-a')).toMatchObject({
      declaredBy: 'host-1',
      undeclared: false,
      undeclaredSince: null,
    });
    expect(list.get('sync-b')).toMatchObject({ declaredBy: 'host-1', undeclared: false });
    const hash = (await row('sync-a')).hash;

    // A second host declares only sync-a; the first stops: sync-b is undeclared since the first stopped.
    const h2 = new WorkerHost({ connectionString: f.url, instanceId: 'host-2', cron: [a], ...opts });
    hosts.push(h2);
    await h2.start();
    await h1.stop();
    list = await mine();
    expect(list.get('sync-a')).toMatchObject({ declaredBy: 'host-2', undeclared: false });
    const bState = list.get('sync-b')!;
    expect(bState).toMatchObject({ declaredBy: 'host-1', undeclared: true });
    const { rows } = await f.pool.query(
      `select stopped_at from awa.runtime_instances where instance_id = 'host-1'`,
    );
    expect(bState.undeclaredSince).toEqual(rows[0].stopped_at);
    expect((await row('sync-a')).hash).toBe(hash); // same definition: not rewritten

    // A new version of sync-a: the next host to start rewrites the row.
    const a2 = defineCron({ name: 'sync-a', cron: '0 0 2 1 *', kind, args: {} });
    const h3 = new WorkerHost({ connectionString: f.url, instanceId: 'host-3', cron: [a2], ...opts });
    hosts.push(h3);
    await h3.start();
    list = await mine();
    expect(list.get('sync-a')).toMatchObject({ cron: '0 0 2 1 *', declaredBy: 'host-3', undeclared: false });
    expect((await row('sync-a')).hash).not.toBe(hash);
  });

  it('hosts of the release before the `cron` rename keep syncing and reading schedules during a rolling deploy', async () => {
    // What that release sent: the expression under `expression` (migration 019 renamed the column to `cron`).
    const def = {
      name: 'old-host',
      expression: '15 4 * * *',
      timezone: 'UTC',
      kind: 'old_kind',
      queue: 'old_q',
      priority: 2,
      args: {},
      max_attempts: 25,
      meta: null,
      missed_fire: 'latest',
      hash: 'h-old',
    };
    const sync = await f.pool.query(`select * from awa.cron_sync('old-1', $1::jsonb, 30)`, [
      JSON.stringify([def]),
    ]);
    expect(sync.rows).toEqual([{ cron_name: 'old-host', action: 'created' }]);
    // What that release reads back: `expression`, beside this release's `cron`.
    const pending = await f.pool.query(
      `select cron, expression from awa.cron_pending() where cron_name = 'old-host'`,
    );
    expect(pending.rows).toEqual([{ cron: '15 4 * * *', expression: '15 4 * * *' }]);
    const listed = await f.pool.query(
      `select cron, expression from awa.cron_list(30) where cron_name = 'old-host'`,
    );
    expect(listed.rows).toEqual([{ cron: '15 4 * * *', expression: '15 4 * * *' }]);
    expect((await f.client.listCron()).find((s) => s.name === 'old-host')).toMatchObject({
      cron: '15 4 * * *',
    });
  });

  it('an args schema that rejects asynchronously stops the host at start', async () => {
    const slow = defineJob<{ n: number }>({
      kind: 'slow_cron',
      schema: {
        '~standard': {
          version: 1,
          vendor: 'test',
          validate: async () => ({ issues: [{ message: 'no' }] }),
        },
      },
    });
    const bad = defineCron({ name: 'slow', cron: '@daily', kind: slow, args: { n: 1 } });
    const h = new WorkerHost({ connectionString: f.url, maintenance: false, cron: [bad] });
    await expect(h.start()).rejects.toMatchObject({ code: 'AWA_INVALID_ARGS' });
    expect((await f.client.listCron()).some((s) => s.name === 'slow')).toBe(false);
  });
});

describe('a live host', () => {
  it('the leader fires a per-second schedule every second, one job per fire time, and the jobs run', async () => {
    const tick = defineJob<{ n: number }>({ kind: 'live_tick', queue: 'live_q' });
    const ran: string[] = [];
    const fires: CronFire[] = [];
    const host = new WorkerHost({
      connectionString: f.url,
      queues: { live_q: 4 },
      pollIntervalMs: 20,
      leaderElectionIntervalMs: 50,
      cronIntervalMs: 100,
      completedRetentionMs: 3_600_000,
      cron: [defineCron({ name: 'live', cron: '* * * * * *', kind: tick, args: { n: 1 } })],
    });
    host.register(tick, (job) => void ran.push(job.id));
    host.on('cron', (x) => fires.push(...x));
    hosts.push(host);
    await host.start();
    const deadline = Date.now() + 10_000;
    while (ran.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await host.stop();
    expect(ran.length).toBeGreaterThanOrEqual(3);
    const fired = fires.filter((x) => x.outcome === 'fired');
    const times = fired.map((x) => x.fireAt.getTime());
    expect(new Set(times).size).toBe(times.length);
    // Consecutive seconds: nothing was dropped between the first and the last fire.
    expect(times.at(-1)! - times[0]!).toBe((times.length - 1) * 1000);
    for (const id of ran.slice(0, 3)) {
      const job = await f.client.getJob(id);
      expect(job!.state).toBe('completed');
    }
  });
});

describe('awa cron (CLI)', () => {
  function awa(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: f.url };
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'cron', ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    return new Promise((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code) => resolve({ code, stdout, stderr }));
    });
  }

  it('list, pause, resume, trigger and remove, in text and JSON; unknown names and bad usage fail', async () => {
    await declare(
      defineCron({ name: 'cli-a', cron: '15 4 * * *', timezone: 'Europe/Berlin', kind: 'cli_job', args: {} }),
    );
    const [list, pause, listPaused] = [
      await awa(['list', '--json']),
      await awa(['pause', 'cli-a']),
      await awa(['list']),
    ];
    expect(list.code).toBe(0);
    const entry = (JSON.parse(list.stdout) as Record<string, unknown>[]).find((s) => s.name === 'cli-a')!;
    expect(entry).toMatchObject({
      cron: '15 4 * * *',
      timezone: 'Europe/Berlin',
      paused: false,
      undeclared: true,
    });
    expect(typeof entry.nextFireAt).toBe('string');
    expect(pause).toEqual({ code: 0, stdout: 'paused cli-a\n', stderr: '' });
    expect(listPaused.code).toBe(0);
    const line = listPaused.stdout.split('\n').find((l) => l.startsWith('cli-a '))!;
    expect(line).toMatch(
      /^cli-a\s+15 4 \* \* \*\s+Europe\/Berlin\s+cli_job\s+default\s+paused\s+-\s+-\s+undeclared since /,
    );
    expect(listPaused.stdout.split('\n')[0]).toMatch(
      /^name\s+cron\s+timezone\s+kind\s+queue\s+next_fire\s+last_fire/,
    );

    const resume = await awa(['resume', 'cli-a', '--json']);
    expect(resume.code).toBe(0);
    expect(JSON.parse(resume.stdout)).toEqual({ name: 'cli-a', paused: false, changed: true });
    const trigger = await awa(['trigger', 'cli-a', '--json']);
    expect(trigger.code).toBe(0);
    const t = JSON.parse(trigger.stdout) as { id: string; inserted: boolean };
    expect(t.inserted).toBe(true);
    expect((await f.client.getJob(t.id))!.kind).toBe('cli_job');

    const [unknown, usage] = await Promise.all([awa(['pause', 'nope']), awa(['pause'])]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no cron schedule is named "nope"');
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('usage: awa cron list | cron pause <name>');
    expect(await awa(['remove', 'cli-a'])).toEqual({ code: 0, stdout: 'removed cli-a\n', stderr: '' });
    expect(await awa(['list', '--json'])).toMatchObject({ code: 0 });
  });
});
