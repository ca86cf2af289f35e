import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/main.js';
import {
  AwaClient,
  defineHandler,
  defineJob,
  InvalidOptionError,
  startDashboard,
  type QueueHealth,
  type RunningServer,
} from '../../src/index.js';
import { createTestSchema, drainQueue } from '../../src/testing/index.js';
import { JOB_STATES } from '../../src/model/job.js';
import { startReplicaPair, type ReplicaPair } from '../helpers/replica.js';
import { until } from '../helpers/wait.js';

// Operator reads on a real streaming replica: a primary and a hot standby of the test's own (initdb and
// pg_basebackup, test/helpers/replica.ts). Replay is paused to tell the two servers apart: what the primary
// wrote after the pause is visible on the primary only, so a read that misses it was served by the standby,
// and an action that succeeds ran on the primary (the standby refuses every write). Both servers are this
// file's own; it drops nothing else.

let pair: ReplicaPair;
/** Reads on the standby, actions on the primary. */
let client: AwaClient;
/** Everything on the primary: the truth to compare with. */
let primary: AwaClient;

beforeAll(async () => {
  pair = await startReplicaPair();
  primary = new AwaClient({ connectionString: pair.primaryUrl, poolSize: 2 });
  await primary.migrate();
  client = new AwaClient({
    connectionString: pair.primaryUrl,
    readConnectionString: pair.replicaUrl,
    poolSize: 2,
    onAudit: () => {},
  });
  await pair.caughtUp();
}, 120_000);

afterAll(async () => {
  await pair?.resumeReplay().catch(() => {});
  await client?.close();
  await primary?.close();
  await pair?.stop();
});

/** Runs `fn` with the standby's replay paused, resuming it (and waiting for it to catch up) afterwards. */
async function whilePaused<T>(fn: () => Promise<T>): Promise<T> {
  await pair.pauseReplay();
  try {
    return await fn();
  } finally {
    await pair.resumeReplay();
    await pair.caughtUp();
  }
}

describe('a client with readConnectionString', () => {
  it('reads from the standby: a job the primary took after replay paused is not seen until replay resumes', async () => {
    const seen = await client.enqueue('replica.seen', { n: 1 }, { queue: 'replica_q' });
    await pair.caughtUp();
    const late = await whilePaused(async () => {
      const late = await client.enqueue('replica.late', { n: 2 }, { queue: 'replica_q' });
      expect(await primary.getJob(late.id)).toMatchObject({ state: 'available' });
      expect(await client.getJob(late.id)).toBeNull();
      expect(await client.getJob(seen.id)).toMatchObject({ state: 'available' });
      const page = await client.listJobs({ state: 'available', queue: 'replica_q' });
      expect(page.map((j) => j.id)).toEqual([seen.id]);
      const [health] = (await client.queueHealth()).filter((q) => q.queue === 'replica_q');
      expect(health).toMatchObject({ available: 1 });
      const [truth] = (await primary.queueHealth()).filter((q) => q.queue === 'replica_q');
      expect(truth).toMatchObject({ available: 2 });
      const lag = await client.readLag();
      expect(lag.reads).toBe('replica');
      expect(lag.bytesBehind).toBeGreaterThan(0);
      expect(lag.lagMs).not.toBe(0);
      return late;
    });
    expect(await client.getJob(late.id)).toMatchObject({ state: 'available' });
    // Caught up: the primary's own background writes (checkpoints, hint bits) may keep it a few bytes behind for
    // a moment, so the answer is waited for.
    await until('caught up', async () => {
      const lag = await client.readLag();
      return lag.reads === 'replica' && lag.bytesBehind === 0 && lag.lagMs === 0;
    });
  });

  it('acts on the primary, and the read after an action shows it', async () => {
    const { id } = await client.enqueue('replica.cancel', {}, { queue: 'replica_act' });
    expect(await client.cancel(id)).toBe('available');
    // cancel() returned once the standby replayed it: the next read, on the standby, sees it.
    expect(await client.getJob(id)).toMatchObject({ state: 'cancelled' });
    expect(await client.pauseQueue('replica_act')).toBe(true);
    expect((await client.queueHealth()).find((q) => q.queue === 'replica_act')).toMatchObject({
      paused: true,
    });
    const page = await client.auditLog({ limit: 5 });
    expect(page.map((r) => r.action).slice(0, 2)).toEqual(['queue.pause', 'job.cancel']);
  });

  it('still acts while the standby is stalled: the action commits, and the stale read says how far behind it is', async () => {
    const { id } = await client.enqueue('replica.stalled', {}, { queue: 'replica_stall' });
    await pair.caughtUp();
    await whilePaused(async () => {
      expect(await client.cancel(id)).toBe('available');
      expect(await primary.getJob(id)).toMatchObject({ state: 'cancelled' });
      expect(await client.getJob(id)).toMatchObject({ state: 'available' });
      expect((await client.readLag()).bytesBehind).toBeGreaterThan(0);
    });
    expect(await client.getJob(id)).toMatchObject({ state: 'cancelled' });
  });

  it('serves every operator read from a hot standby (none writes; counts match the primary), and the storage reads from the primary', async () => {
    for (let i = 0; i < 20; i++) await client.enqueue('replica.every', { i }, { queue: 'replica_every' });
    const { id } = await client.enqueue('replica.every', { i: 'x' }, { queue: 'replica_every' });
    await pair.caughtUp();
    // The standby's sequences read up to 32 positions ahead of the primary's (nextval logs ahead): counted from
    // them, these 21 jobs showed as 33.
    const counts = (await client.counts()).find((c) => c.queue === 'replica_every');
    expect(counts).toEqual((await primary.counts()).find((c) => c.queue === 'replica_every'));
    expect(counts).toMatchObject({ available: 21 });
    for (const state of JOB_STATES) {
      expect(Array.isArray(await client.listJobs({ state, limit: 5 }))).toBe(true);
    }
    expect(await client.getJob(id)).toMatchObject({ kind: 'replica.every', args: { i: 'x' } });
    expect(await client.jobProgress(id)).toBeNull();
    expect(await client.compactHistorySpan('replica_every')).toBeNull();
    expect(await client.runtimeList()).toEqual([]);
    expect(await client.descriptors()).toEqual([]);
    expect(await client.listDlq()).toEqual([]);
    expect(await client.dlqPage()).toEqual([]);
    expect(await client.countDlq()).toEqual({ count: 0, capped: false });
    expect(await client.purgeDlq({ queue: 'replica_every', before: new Date() }, { dryRun: true })).toBe(0);
    expect(await client.listCron()).toEqual([]);
    expect((await client.auditLog()).length).toBeGreaterThan(0);
    // Table statistics are each server's own: the standby's count none of the primary's rows. These two read the
    // primary, so the 21 ready rows show (once the primary's backends have flushed their counters: within ~10 s).
    await until(
      'the primary counts the ready rows',
      async () => {
        const ready = (await client.storageStatus()).find((f) => f.family === 'ready_entries');
        const current = (await client.ringStatus()).find((s) => s.role === 'current');
        return (ready?.liveTuples ?? 0) >= 21 && (current?.readyRows ?? 0) >= 21;
      },
      30_000,
    );
    const standbyStats = new pg.Client({ connectionString: pair.replicaUrl });
    await standbyStats.connect();
    try {
      const { rows } = await standbyStats.query<{ live: string }>(
        "select coalesce(sum(n_live_tup), 0)::text as live from pg_stat_user_tables where relname like 'ready_entries_%'",
      );
      expect(rows[0]!.live).toBe('0');
    } finally {
      await standbyStats.end();
    }
  });

  it('after a drain with failures, the standby answers every count, health figure and page as the primary does', async () => {
    // Our own test helpers (awa-node/testing): a schema of this test's own on the primary, drained by a real host.
    const t = await createTestSchema({ connectionString: pair.primaryUrl });
    const onReplica = new AwaClient({
      connectionString: pair.primaryUrl,
      readConnectionString: pair.replicaUrl,
      schema: t.schema,
      poolSize: 2,
    });
    try {
      const work = defineJob<{ n: number }>({
        kind: 'replica.drain',
        queue: 'replica_drain',
        maxAttempts: 1,
      });
      const handler = defineHandler(work, async (job) => {
        if (job.args.n % 5 === 0) throw new Error(`job ${job.args.n} fails`);
      });
      await t.client.enqueueMany(Array.from({ length: 40 }, (_, n) => ({ kind: work, args: { n } })));
      const drained = await drainQueue(t, handler, { concurrency: 4 });
      expect(drained.outcomes).toMatchObject({ completed: 32, failed: 8 });
      for (let n = 0; n < 6; n++) await t.client.enqueue(work, { n: 100 + n });
      await pair.caughtUp();
      expect(await onReplica.counts()).toEqual(await t.client.counts());
      const health = (h: QueueHealth[]) =>
        h.map(({ oldestAvailableAt, ...rest }) => ({ ...rest, oldest: !!oldestAvailableAt }));
      expect(health(await onReplica.queueHealth())).toEqual(health(await t.client.queueHealth()));
      for (const state of ['available', 'completed', 'failed'] as const) {
        const page = await onReplica.listJobs({ state, limit: 100 });
        expect(page).toEqual(await t.client.listJobs({ state, limit: 100 }));
        expect(page).toHaveLength(state === 'available' ? 6 : state === 'completed' ? 32 : 8);
      }
    } finally {
      await onReplica.close();
      await t.drop();
    }
  });

  it('refuses a readConnectionString that is not a postgres URL, naming the field', () => {
    expect(
      () => new AwaClient({ connectionString: pair.primaryUrl, readConnectionString: 'mysql://x/y' }),
    ).toThrow(InvalidOptionError);
    expect(() => new AwaClient({ connectionString: pair.primaryUrl, readConnectionString: '' })).toThrow(
      /readConnectionString/,
    );
  });

  it('says where it reads without one: the primary, never behind', async () => {
    expect(await primary.readLag()).toEqual({ reads: 'primary', bytesBehind: 0, lagMs: 0, replayedAt: null });
  });
});

describe('the dashboard and the CLI on a replica', () => {
  let server: RunningServer;
  const TOKEN = 'replica-dashboard-token-0123456789';

  beforeAll(async () => {
    server = await startDashboard({ client, auth: { token: TOKEN }, port: 0 });
  });
  afterAll(async () => {
    await server?.close();
  });

  const api = async (path: string): Promise<Record<string, unknown>> => {
    const res = await fetch(`${server.url}/dashboard/api${path}`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(res.status).toBe(200);
    return (await res.json()) as Record<string, unknown>;
  };

  it('the dashboard reports the replica and its lag, caught up or behind', async () => {
    await until('the dashboard says caught up', async () => {
      const lag = await api('/reads');
      return lag.reads === 'replica' && lag.bytesBehind === 0 && lag.lagMs === 0;
    });
    await whilePaused(async () => {
      await client.enqueue('replica.dash', {}, { queue: 'replica_dash' });
      const behind = await api('/reads');
      expect(behind.reads).toBe('replica');
      expect(behind.bytesBehind).toBeGreaterThan(0);
      const queues = (await api('/queues')).queues as { queue: string }[];
      expect(queues.map((q) => q.queue)).not.toContain('replica_dash');
    });
    const queues = (await api('/queues')).queues as { queue: string }[];
    expect(queues.map((q) => q.queue)).toContain('replica_dash');
  });

  async function awa(args: readonly string[], env: Record<string, string>) {
    let stdout = '';
    let stderr = '';
    const code = await runCli(args, {
      env,
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: (s: string) => (stderr += s) },
    });
    return { code, stdout, stderr };
  }

  it('awa job and queue read from --read-database-url and say how far behind it was', async () => {
    const env = { DATABASE_URL: pair.primaryUrl, AWA_READ_DATABASE_URL: pair.replicaUrl };
    const { id } = await client.enqueue('replica.cli', {}, { queue: 'replica_cli' });
    await pair.caughtUp();
    const shown = await awa(['job', 'show', id, '--json'], env);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({ id, state: 'available' });
    // Caught up a moment ago; the primary's background writes may put it a few bytes behind since.
    expect(shown.stderr.trim()).toMatch(/^read from a replica, (caught up|\S+ behind)$/);
    await whilePaused(async () => {
      const late = await client.enqueue('replica.cli', {}, { queue: 'replica_cli' });
      const missing = await awa(['job', 'show', late.id], env);
      expect(missing.code).not.toBe(0);
      const onPrimary = await awa(['job', 'show', late.id, '--json'], { DATABASE_URL: pair.primaryUrl });
      expect(onPrimary.code).toBe(0);
      expect(onPrimary.stderr).toBe('');
      const list = await awa(['queue', 'show', 'replica_cli', '--read-database-url', pair.replicaUrl], {
        DATABASE_URL: pair.primaryUrl,
      });
      expect(list.code).toBe(0);
      expect(list.stderr.trim()).toMatch(/^read from a replica, \S+ behind$/);
    });
  });
});
