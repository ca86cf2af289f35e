import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AwaClient,
  CancelJob,
  defineJob,
  InvalidOptionError,
  FailJob,
  WorkerHost,
  type Job,
  type WorkerOptions,
} from '../../src/index.js';
import {
  claimJobs,
  settleAttempts,
  pruneRing,
  resolveSchema,
  rotateRing,
} from '../../src/storage/operations.js';
import { settleAll } from '../helpers/claim.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// The operator surface against a real database: queue pause and resume fleet-wide, queue health, job
// listing with paging, retrying ended jobs, live hosts with their snapshots, and descriptors with stale and
// drift flags.

const FAST: Partial<WorkerOptions> = {
  pollIntervalMs: 20,
  promoteIntervalMs: 20,
  leaderElectionIntervalMs: 50,
  heartbeatIntervalMs: 100,
  heartbeatStalenessMs: 1_000,
  shutdownTimeoutMs: 3_000,
};

let db: TestDatabase;
let client: AwaClient;
const hosts: WorkerHost[] = [];

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('operator'));
});
afterEach(() => stopHosts(hosts));
afterAll(() => closeDatabase(client, db));

async function start(options: WorkerOptions): Promise<WorkerHost> {
  const h = new WorkerHost({ connectionString: db.url, ...FAST, ...options });
  h.on('error', () => {});
  return h;
}

const state = async (id: string) => (await client.getJob(id))?.state;

/** One storage-level claim of up to `max` jobs of `queue`, as a host would make it. */
const claimBatchesOf = async (queue: string, max: number) =>
  (
    await claimJobs(client.pool, resolveSchema(), {
      queue,
      max,
      instanceId: 'operator-test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    })
  ).batches;

describe('queue pause', () => {
  it('a paused queue is not claimed (running jobs finish, enqueues accepted); resume wakes hosts at once', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'pz', queue: 'pz' });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const ran: number[] = [];
    // A 30 s poll: only a notification can make it claim quickly after resume.
    const host = await start({ queues: { pz: 4 }, pollIntervalMs: 30_000 });
    host.register(kind, async (job: Job<{ n: number }>) => {
      ran.push(job.args.n);
      if (job.args.n === 1) await gate;
    });
    await host.start();
    hosts.push(host);
    const first = await client.enqueue(kind, { n: 1 });
    await until('the first job to run', async () => ran.includes(1));

    expect(await client.pauseQueue('pz')).toBe(true);
    expect(await client.pauseQueue('pz')).toBe(false);
    expect((await client.counts()).find((c) => c.queue === 'pz')?.paused).toBe(true);
    const later = await client.enqueue(kind, { n: 2 });
    expect(later.inserted).toBe(true);
    release();
    await until('the running job to finish', async () => (await state(first.id)) === 'completed');
    await new Promise((r) => setTimeout(r, 500));
    expect(await state(later.id)).toBe('available');
    expect(ran).toEqual([1]);

    const resumedAt = Date.now();
    expect(await client.resumeQueue('pz')).toBe(true);
    await until(
      'the waiting job to run after resume',
      async () => (await state(later.id)) === 'completed',
      5_000,
    );
    expect(Date.now() - resumedAt).toBeLessThan(5_000);
    expect((await client.counts()).find((c) => c.queue === 'pz')?.paused).toBe(false);
  });
});

describe('queue health and listings', () => {
  it('reports counts, recent completions and failures, the oldest available job and pause state', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'qh', queue: 'qh', maxAttempts: 1 });
    const before = Date.now();
    await client.enqueueMany(Array.from({ length: 5 }, (_, n) => ({ kind, args: { n } })));
    let health = (await client.queueHealth()).find((q) => q.queue === 'qh')!;
    expect(health).toMatchObject({
      available: 5,
      running: 0,
      completedRecent: 0,
      failedRecent: 0,
      paused: false,
    });
    expect(health.oldestAvailableAt!.getTime()).toBeGreaterThanOrEqual(before - 1_000);
    expect(health.oldestAvailableAt!.getTime()).toBeLessThanOrEqual(Date.now());

    const host = await start({ queues: { qh: 2 } });
    host.register(kind, (job: Job<{ n: number }>) => {
      if (job.args.n === 4) throw new FailJob('bad');
    });
    await host.start();
    hosts.push(host);
    await until(
      'drained',
      async () => (await client.counts()).find((c) => c.queue === 'qh')?.available === 0,
    );
    await until('all settled', async () => {
      const h = (await client.queueHealth()).find((q) => q.queue === 'qh')!;
      return h.completedRecent === 4 && h.failedRecent === 1 ? h : undefined;
    });
    health = (await client.queueHealth({ windowMs: 60_000 })).find((q) => q.queue === 'qh')!;
    expect(health).toMatchObject({ available: 0, completed: 4, failed: 1, oldestAvailableAt: null });
  });

  it('lists jobs per state with keyset paging, and retries ended or waiting ones', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'lj', queue: 'lj', maxAttempts: 1 });
    const sched = await Promise.all(
      Array.from(
        { length: 5 },
        async (_, n) => (await client.enqueue(kind, { n }, { delayMs: 3_600_000 })).id,
      ),
    );
    const page1 = await client.listJobs({ state: 'scheduled', queue: 'lj', limit: 3 });
    expect(page1.map((j) => j.id)).toEqual([...sched].sort((a, b) => Number(b) - Number(a)).slice(0, 3));
    const page2 = await client.listJobs({
      state: 'scheduled',
      queue: 'lj',
      limit: 3,
      beforeId: page1.at(-1)!.id,
    });
    expect(page2.map((j) => j.id)).toEqual([...sched].sort((a, b) => Number(b) - Number(a)).slice(3));
    expect(page1.every((j) => j.state === 'scheduled' && j.kind === 'lj' && j.queue === 'lj')).toBe(true);

    // Retry a scheduled job: it becomes due now.
    expect(await client.retryJob(sched[0]!)).toEqual({ retried: true, from: 'scheduled' });
    const host = await start({ queues: { lj: 2 } });
    host.register(kind, (job: Job<{ n: number }>) => {
      if (job.args.n === 0) throw new CancelJob('first run cancels');
      if (job.args.n === 1) throw new FailJob('first run fails');
    });
    await host.start();
    hosts.push(host);
    await until('the retried job to be cancelled', async () => (await state(sched[0]!)) === 'cancelled');
    const cancelled = await client.listJobs({ state: 'cancelled', queue: 'lj' });
    expect(cancelled.map((j) => j.id)).toEqual([sched[0]]);
    // Retry the cancelled one (fresh attempt counter): it runs again, and cancels again.
    expect(await client.retryJob(sched[0]!)).toEqual({ retried: true, from: 'cancelled' });
    await until('run again', async () => (await client.getJob(sched[0]!))?.meta?.errors?.length === 2);
    expect(await client.retryJob('999999999')).toEqual({ retried: false, reason: 'not_found', state: null });

    const completed = await client.listJobs({ state: 'completed', queue: 'lj' });
    expect(completed).toEqual([]);
    await expect(client.listJobs({ state: 'nope' as never })).rejects.toMatchObject({
      field: 'filter.state',
    });
  });
});

describe('available jobs', () => {
  it('lists jobs that committed late below the high-water, in agreement with the count', async () => {
    const queue = 'late_list';
    const jobs = (n: number, from: number) =>
      Array.from({ length: n }, (_, i) => ({ kind: 'late', args: { i: from + i }, options: { queue } }));
    // A load takes its positions first and stays open; a later one commits and is claimed past it (its block
    // becomes an open gap below the lane's high-water); then the first commits, unclaimed.
    const open = new pg.Client({ connectionString: db.url });
    await open.connect();
    try {
      await open.query('begin');
      await client.copyEnqueue(jobs(40, 0), { client: open });
      await client.copyEnqueue(jobs(5, 40));
      expect((await claimBatchesOf(queue, 100)).flatMap((b) => b.jobs)).toHaveLength(5);
      await open.query('commit');
    } finally {
      await open.end();
    }
    const counted = (await client.counts()).find((c) => c.queue === queue);
    expect(counted).toMatchObject({ available: 40, running: 5 });
    const listed = await client.listJobs({ state: 'available', queue, limit: 100 });
    expect(listed).toHaveLength(40);
    expect(new Set(listed.map((j) => j.id)).size).toBe(40);
    expect(listed.every((j) => j.state === 'available' && j.queue === queue)).toBe(true);
    expect(await client.listJobs({ state: 'available', queue, limit: 10 })).toHaveLength(10);
    // Every one listed is claimable, and the list empties with them.
    const batches = await claimBatchesOf(queue, 100);
    const taken = batches.flatMap((b) => b.jobs.map((j) => j.id));
    expect(taken.sort()).toEqual(listed.map((j) => j.id).sort());
    await settleAttempts(client.pool, resolveSchema(), settleAll(batches, 'completed'));
    expect(await client.listJobs({ state: 'available', queue })).toEqual([]);
  });
});

describe('completed jobs', () => {
  it('are filtered by queue and kind before the limit, across the ring and compact history', async () => {
    const schema = resolveSchema();
    const completeAll = async (queue: string, perClaim: number) => {
      for (;;) {
        const batches = await claimBatchesOf(queue, perClaim);
        if (batches.length === 0) return;
        await settleAttempts(client.pool, schema, settleAll(batches, 'completed'));
      }
    };
    const enqueue = (queue: string, kind: string, n: number) =>
      client.enqueueMany(Array.from({ length: n }, (_, i) => ({ kind, args: { i }, options: { queue } })));
    // Older mail completions, pruned from the ring into compact history (ids only, no kind).
    await enqueue('s_mail', 'mail_send', 40);
    await completeAll('s_mail', 500);
    for (let i = 0; i < 20 && !(await client.compactHistorySpan('s_mail')); i++) {
      await rotateRing(client.pool, schema);
      // Carrying forward whatever earlier tests of this file left in the oldest slot, so it can go.
      await pruneRing(client.pool, schema, { lockTimeoutMs: 200, carryLimit: 100_000, carryAfterSlots: 1 });
    }
    expect(await client.compactHistorySpan('s_mail')).not.toBeNull();
    // Newer: 30 more mail jobs, then 80 report jobs completed one per receipt: the newest 50 completion
    // records of the ring are all reports'.
    await enqueue('s_mail', 'mail_send', 30);
    await completeAll('s_mail', 500);
    await enqueue('s_reports', 'report', 80);
    await completeAll('s_reports', 1);

    const mail = await client.listJobs({ state: 'completed', queue: 's_mail', limit: 50 });
    expect(mail).toHaveLength(50);
    expect(new Set(mail.map((j) => j.id)).size).toBe(50);
    expect(mail.every((j) => j.queue === 's_mail')).toBe(true);
    // Newest first: the 30 in the ring (with their kind), then 20 from compact history (without).
    expect(mail.slice(0, 30).every((j) => j.kind === 'mail_send')).toBe(true);
    expect(mail.slice(30).every((j) => j.kind === null)).toBe(true);
    expect(await client.listJobs({ state: 'completed', queue: 's_reports', limit: 5 })).toHaveLength(5);
    // A kind filter finds the ones that kept their kind; compact history says when the others closed.
    const byKind = await client.listJobs({
      state: 'completed',
      queue: 's_mail',
      kind: 'mail_send',
      limit: 100,
    });
    expect(byKind).toHaveLength(30);
    expect(await client.compactHistorySpan('s_reports')).toBeNull();
  });
});

describe('job ids', () => {
  it('reads and actions take the id or what enqueue() returned; anything else is a typed error, rejected', async () => {
    const enqueued = await client.enqueue('ids', { n: 1 }, { queue: 'ids_q', delayMs: 3_600_000 });
    expect(await client.getJob(enqueued)).toMatchObject({ id: enqueued.id, state: 'scheduled' });
    expect(await client.jobProgress(enqueued)).toBeNull();
    expect(await client.cancel(enqueued)).toBe('scheduled');
    expect(await client.retryJob(enqueued)).toEqual({ retried: true, from: 'cancelled' });
    for (const bad of ['abc', '', '12x', { id: 7 }, {}, null, 12]) {
      await expect(client.getJob(bad as never)).rejects.toBeInstanceOf(InvalidOptionError);
      await expect(client.cancel(bad as never)).rejects.toMatchObject({
        code: 'AWA_INVALID_OPTION',
        field: 'id',
      });
    }
    // A malformed token is a rejected promise, like every other failure of these calls, not a throw.
    const pending = client.completeExternal('not-a-token');
    expect(pending).toBeInstanceOf(Promise);
    await expect(pending).rejects.toBeInstanceOf(InvalidOptionError);
  });
});

describe('retry', () => {
  it('says why a job was not retried: no such job, a state with nothing to retry, or a unique key held', async () => {
    const plain = await client.enqueue('rt_plain', { n: 1 }, { queue: 'rt_q' });
    expect(await client.retryJob(plain)).toEqual({
      retried: false,
      reason: 'not_retryable',
      state: 'available',
    });
    await settleAttempts(
      client.pool,
      resolveSchema(),
      settleAll(await claimBatchesOf('rt_q', 10), 'completed'),
    );
    expect(await client.retryJob(plain)).toEqual({
      retried: false,
      reason: 'not_retryable',
      state: 'completed',
    });

    // A unique job cancelled gives up its key; another job takes it; the first cannot come back meanwhile.
    const unique = { unique: { key: 'rt:1' }, queue: 'rt_q', delayMs: 3_600_000 };
    const first = await client.enqueue('rt_unique', { n: 1 }, unique);
    expect(await client.cancel(first)).toBe('scheduled');
    const second = await client.enqueue('rt_unique', { n: 2 }, unique);
    expect(second.inserted).toBe(true);
    expect(await client.retryJob(first)).toEqual({
      retried: false,
      reason: 'unique_held',
      state: 'cancelled',
      heldBy: second.id,
    });
    // The same from the DLQ: a job dead-lettered while another holds its key stays there, and says who holds it.
    await client.pool.query(
      `insert into ${resolveSchema().ident}.queue_settings (queue, dlq_enabled) values ('rt_dlq', true)`,
    );
    const dead = await client.enqueue('rt_unique', { n: 3 }, { unique: { key: 'rt:2' }, queue: 'rt_dlq' });
    const batches = await claimBatchesOf('rt_dlq', 10);
    await settleAttempts(
      client.pool,
      resolveSchema(),
      settleAll(batches, 'failed', { error: { error: 'boom' } }),
    );
    expect(await state(dead.id)).toBe('dlq');
    const holder = await client.enqueue('rt_unique', { n: 4 }, { unique: { key: 'rt:2' }, queue: 'rt_dlq' });
    expect(await client.retryJob(dead)).toEqual({
      retried: false,
      reason: 'unique_held',
      state: 'dlq',
      heldBy: holder.id,
    });
    expect(await state(dead.id)).toBe('dlq');
    expect(await client.cancel(holder)).toBe('available');
    expect(await client.retryJob(dead)).toEqual({ retried: true, from: 'dlq' });
    expect(await state(dead.id)).toBe('available');
  });
});

describe('runtimes and descriptors', () => {
  it('lists live hosts with version, concurrency, in-flight and the leader; derives stale and drift', async () => {
    const kind = defineJob<{ n: number }>({
      kind: 'desc',
      queue: 'desc',
      describe: { label: 'Describe me', owner: 'team-a', docsUrl: 'https://example.com/runbook' },
    });
    const a = await start({
      queues: { desc: { concurrency: 3, describe: { label: 'Desc queue', owner: 'team-a' } } },
      instanceId: 'host-a',
      snapshotIntervalMs: 200,
    });
    a.register(kind, () => new Promise((r) => setTimeout(r, 2_000)));
    await a.start();
    hosts.push(a);
    await until('a leader', async () => a.isLeader);
    await client.enqueue(kind, { n: 1 });
    await until('host-a running one job, reported by its heartbeat', async () => {
      const r = (await client.runtimeList()).find((x) => x.instanceId === 'host-a');
      return r?.inFlight === 1 && r.isLeader ? r : undefined;
    });
    const ra = (await client.runtimeList()).find((x) => x.instanceId === 'host-a')!;
    expect(ra).toMatchObject({ live: true, concurrency: { desc: 3 }, queues: ['desc'] });
    expect(ra.version).toMatch(/^\d+\.\d+\.\d+/);

    let ds = await client.descriptors();
    expect(ds.find((d) => d.subject === 'queue' && d.name === 'desc')).toMatchObject({
      descriptor: { label: 'Desc queue', owner: 'team-a', concurrency: 3 },
      stale: false,
      drift: false,
      reporters: 1,
    });
    expect(ds.find((d) => d.subject === 'kind' && d.name === 'desc')?.descriptor).toMatchObject({
      label: 'Describe me',
      docsUrl: 'https://example.com/runbook',
    });

    // A second host declaring the queue differently: drift.
    const b = await start({
      queues: { desc: { concurrency: 5, describe: { label: 'Other label' } } },
      instanceId: 'host-b',
      maintenance: false,
    });
    b.register(kind, () => {});
    await b.start();
    hosts.push(b);
    ds = await client.descriptors();
    expect(ds.find((d) => d.subject === 'queue' && d.name === 'desc')).toMatchObject({
      drift: true,
      reporters: 2,
    });

    // Stopped hosts: no longer live; their descriptors go stale.
    await Promise.all(hosts.splice(0).map((h) => h.stop()));
    expect((await client.runtimeList()).filter((r) => r.live)).toEqual([]);
    ds = await client.descriptors({ liveMs: 1_000 });
    expect(ds.find((d) => d.subject === 'queue' && d.name === 'desc')).toMatchObject({
      stale: true,
      drift: false,
    });
  });

  it('reports storage: ring table families with sizes, and the schema tables', async () => {
    const tables = await client.storageStatus();
    const ready = tables.find((t) => t.family === 'ready_entries');
    expect(ready).toMatchObject({ partitions: 16 });
    expect(ready!.bytes).toBeGreaterThan(0);
    expect(tables.map((t) => t.family)).toEqual(
      expect.arrayContaining(['claim_batches', 'closure_batches', 'lanes']),
    );
    const ring = await client.ringStatus();
    expect(ring.filter((s) => s.role === 'current')).toHaveLength(1);
  });
});
