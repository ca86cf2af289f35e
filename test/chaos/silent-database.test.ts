// Chaos: the database goes silent on every connection the host has open, mid-run. Nothing is closed and no
// error arrives (see silent-proxy.ts): a frozen server, or a failover that left the old address unreachable
// while new connections reach the new primary. Without a bound on how long it waits for an answer, the host
// waits on its claims, flushes, heartbeats and maintenance for as long as TCP keeps the flow (for ever
// behind a relay that acknowledges it; 15 minutes or more otherwise) and does nothing meanwhile. With
// queryTimeoutMs it gives the silent connections up, says so (AWA_DATABASE_UNRESPONSIVE), and finishes the
// run on new ones: no job lost, none run twice, and leadership back on a live session.
// A live server that merely keeps a statement waiting is another matter: the server itself cancels the
// statement at queryTimeoutMs (statement_timeout), before the host's own deadline, so no statement is ever
// abandoned on it. Each abandoned one would keep a backend waiting behind the lock after the host had gone,
// a new one every timeout, until max_connections ran out.
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import { WorkerHost, defineJob } from '../../src/index.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { startSilentProxy, type SilentProxy } from '../helpers/silent-proxy.js';
import { until } from '../helpers/wait.js';

const QUERY_TIMEOUT_MS = 1_000;
const WAVE = 200;

describe('chaos: the database goes silent on every open connection', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let admin: pg.Pool;
  let proxy: SilentProxy | undefined;
  let host: WorkerHost | undefined;
  beforeAll(async () => {
    ({ db, client: client } = await migratedDatabase('silent_db', { poolSize: 2 }));
    admin = sidePool(db.url, 1, 'silent-db-test');
  });
  afterEach(async () => {
    await host?.stop();
    await proxy?.close();
    host = undefined;
    proxy = undefined;
  });
  afterAll(async () => {
    await client?.close();
    await admin?.end();
    await db?.drop();
  });

  it('the host gives the silent connections up within its query timeout, finishes every job on new ones, runs none twice, and leads again', async () => {
    proxy = await startSilentProxy(db.url);
    const kind = defineJob<{ n: number }>({ kind: 'silent_job', queue: 'silent' });
    const runs = new Map<string, number>();
    const errors: { at: number; err: unknown }[] = [];
    host = new WorkerHost({
      connectionString: proxy.url,
      queues: { silent: 8 },
      queryTimeoutMs: QUERY_TIMEOUT_MS,
      heartbeatIntervalMs: 200,
      // The unseat window is twice this, at least 10 s: the shortest there is.
      heartbeatStalenessMs: 5_000,
      leaderElectionIntervalMs: 100,
      promoteIntervalMs: 100,
      shutdownTimeoutMs: 3_000,
    });
    host.on('error', (err) => errors.push({ at: Date.now(), err }));
    host.register(kind, async (job) => {
      runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
      await sleep(5);
    });
    await host.start();
    await until('the host to lead', async () => host!.isLeader, 5_000);
    const leaderBefore = (await leaderLockHolders(admin))[0]!.pid;

    const enqueueWave = async (from: number) =>
      (
        await client.enqueueMany(Array.from({ length: WAVE }, (_, i) => ({ kind, args: { n: from + i } })))
      ).map((r) => r.id);
    const ids = await enqueueWave(0);
    await until('a quarter of the first wave to run', async () => runs.size >= WAVE / 4, 10_000, 1);
    // Silence: the pool's connections (busy and idle), LISTEN's and the leader's.
    const silencedAt = Date.now();
    expect(proxy.silence()).toBeGreaterThanOrEqual(3);
    ids.push(...(await enqueueWave(WAVE)));

    await until(
      'every job to complete',
      async () => (await client.counts()).find((c) => c.queue === 'silent')?.completed === ids.length,
      30_000,
    );
    // Every job ran exactly once: a claim whose answer was lost is handed back unstarted, and a result
    // whose flush went unanswered is written again through the fence of the same attempt.
    expect(runs.size).toBe(2 * WAVE);
    expect([...runs.values()].filter((n) => n !== 1)).toEqual([]);
    // The host said what happened, within the bound (the first statement sent into the silence).
    const unresponsive = errors.filter(
      (e) => (e.err as { code?: string }).code === 'AWA_DATABASE_UNRESPONSIVE' && e.at >= silencedAt,
    );
    expect(unresponsive.length).toBeGreaterThan(0);
    expect(unresponsive[0]!.at - silencedAt).toBeLessThan(QUERY_TIMEOUT_MS + 2_000);
    // Leadership comes back on a live session. The silenced leader session still holds the lock on the
    // server, idle; the host, standing again, ends it once it has sat idle past the unseat window (10 s).
    await until(
      'the host to lead again on a new session',
      async () => {
        const holders = await leaderLockHolders(admin);
        return host!.isLeader && holders.length === 1 && holders[0]!.pid !== leaderBefore;
      },
      20_000,
    );
    console.log(
      `[chaos] silent-database: ${JSON.stringify({
        jobs: ids.length,
        ranOnce: runs.size,
        unresponsiveReports: unresponsive.length,
        firstReportMs: unresponsive[0]!.at - silencedAt,
        leadingAgainMs: Date.now() - silencedAt,
      })}`,
    );
  }, 60_000);

  it('a LISTEN session that falls silent while idle is found out by its idle check, and wake-ups come again', async () => {
    proxy = await startSilentProxy(db.url);
    const kind = defineJob<{ n: number }>({ kind: 'silent_listen_job', queue: 'silent_listen' });
    const ran = new Set<number>();
    const errors: { at: number; err: unknown }[] = [];
    host = new WorkerHost({
      connectionString: proxy.url,
      maintenance: false,
      queues: { silent_listen: 2 },
      queryTimeoutMs: QUERY_TIMEOUT_MS,
      // Nothing but a notification brings a job within the test's bounds, and nothing but the idle check
      // runs a statement on the LISTEN session.
      pollIntervalMs: 60_000,
      shutdownTimeoutMs: 3_000,
    });
    host.on('error', (err) => errors.push({ at: Date.now(), err }));
    host.register(kind, (job) => void ran.add(job.args.n));
    await host.start();
    const first = await client.enqueue(kind, { n: 1 });
    await until('a job woken by its notification', async () => ran.has(1), 5_000);
    // Let the host go quiet (the job's result written, the claims that follow a wake-up done), so that no
    // statement of the moment finds the silence out: only the idle check can.
    await until('the job to complete', async () => (await client.getJob(first.id))?.state === 'completed');
    await sleep(300);
    const silencedAt = Date.now();
    expect(proxy.silence()).toBeGreaterThanOrEqual(2);
    // Found out within an idle period, a check interval and the answer's deadline (1 + 1 + 1.5 s): a new
    // LISTEN session opens beside the silent one (which the server keeps, idle, until the relay closes).
    const listenSessions = async () =>
      (
        await admin.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
            where datname = current_database() and application_name = 'awa-listen'`,
        )
      ).rows[0]!.n;
    await until('a new LISTEN session', async () => (await listenSessions()) === 2, QUERY_TIMEOUT_MS * 5, 20);
    expect(Date.now() - silencedAt).toBeLessThan(QUERY_TIMEOUT_MS * 4);
    // A new LISTEN session wakes the host again (a claim may first meet one of the pool's silent connections).
    await client.enqueue(kind, { n: 2 });
    await until('a job woken on the new session', async () => ran.has(2), 10_000);
  }, 30_000);

  it('a live server cancels a statement kept waiting past the query timeout itself: nothing is abandoned on it, and the host carries on', async () => {
    const instanceId = 'silent-db-lock';
    host = new WorkerHost({
      connectionString: db.url,
      instanceId,
      maintenance: false,
      queues: { silent_lock: 2 },
      queryTimeoutMs: QUERY_TIMEOUT_MS,
      heartbeatIntervalMs: 100,
      shutdownTimeoutMs: 3_000,
    });
    const errors: unknown[] = [];
    host.on('error', (err) => errors.push(err));
    await host.start();
    // Someone holds the host's instance row: every heartbeat waits behind it, for 6 timeouts.
    const holder = new pg.Client({ connectionString: db.url, application_name: 'silent-db-holder' });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query('select 1 from awa.runtime_instances where instance_id = $1 for update', [
        instanceId,
      ]);
      await sleep(6 * QUERY_TIMEOUT_MS);
      // The heartbeat of the moment waits on the server, and nothing else: each statement abandoned by the
      // client would stay behind as one more waiting backend, as would heartbeats overlapping.
      const { rows } = await admin.query<{ waiting: number }>(
        `select count(*)::int as waiting from pg_stat_activity
          where datname = current_database() and application_name = 'awa-worker' and wait_event_type = 'Lock'`,
      );
      expect(rows[0]!.waiting).toBe(1);
    } finally {
      await holder.end();
    }
    const codes = errors.map((e) => (e as { code?: string }).code);
    expect(codes.filter((c) => c === '57014').length).toBeGreaterThanOrEqual(3);
    expect(codes).not.toContain('AWA_DATABASE_UNRESPONSIVE');
    // And the heartbeat gets through once the row is free.
    const beat = async () =>
      (
        await admin.query<{ at: Date }>(
          'select heartbeat_at as at from awa.runtime_instances where instance_id = $1',
          [instanceId],
        )
      ).rows[0]!.at.getTime();
    const before = await beat();
    await until('a heartbeat again', async () => (await beat()) > before, 5_000);
  }, 30_000);
});
