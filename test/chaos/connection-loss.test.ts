// Chaos: every backend of the worker processes (pool, LISTEN and leader connections) is terminated with
// pg_terminate_backend, four times during a run. The workers reconnect (LISTEN included), settle or get
// rescued whatever was in flight, and finish everything.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import type { AwaClient } from '../../src/index.js';
import { chaosSleep } from '../fixtures/chaos-jobs.js';
import {
  assertNoCrash,
  ChaosWorker,
  printReport,
  sleep,
  waitFor,
  waitForTerminal,
  workerConfig,
  openScene,
  closeScene,
  type Scene,
} from './harness.js';
import { verifyRun, type ExpectedJob } from './invariants.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';

describe('chaos: worker connections are terminated', () => {
  let db: Scene['db'];
  let client: AwaClient;
  let pool: pg.Pool;
  let logs: Scene['logs'];
  const workers: ChaosWorker[] = [];

  let scene: Scene | undefined;
  beforeAll(async () => {
    scene = await openScene('terminate');
    ({ db, client, pool, logs } = scene);
  });
  afterAll(async () => {
    await closeScene(scene, workers);
  });

  // The workers' connections, by the application names the worker host gives them: its pool, its LISTEN
  // connection and its leader connection. The test's own client ('awa-client') and pool ('chaos-test')
  // are left alone.
  const WORKER_APPS = ['awa-worker', 'awa-listen', 'awa-leader'];
  const backends = async (): Promise<Record<string, number>> => {
    const { rows } = await pool.query<{ application_name: string; n: string }>(
      `select application_name, count(*) as n from pg_stat_activity
        where datname = $1 and application_name = any($2::text[]) group by 1`,
      [db.name, WORKER_APPS],
    );
    return Object.fromEntries(rows.map((r) => [r.application_name, Number(r.n)]));
  };

  it('pg_terminate_backend of all worker connections, repeatedly: everything completes, nothing is lost', async () => {
    workers.push(
      ...(await Promise.all(
        ['term-a', 'term-b', 'term-c'].map((id) =>
          ChaosWorker.spawn(
            logs.dir,
            workerConfig(db.url, id, { sleepMs: 100, queues: { chaos: { concurrency: 6 } } }),
          ),
        ),
      )),
    );
    await waitFor('a leader', () => workers.some((w) => w.isLeader()), 10_000);
    const N = 600;
    const uids = Array.from({ length: N }, (_, i) => `term-${i}`);
    const ids = (await client.enqueueMany(uids.map((uid) => ({ kind: chaosSleep, args: { uid } })))).map(
      (r) => r.id,
    );
    const expected: ExpectedJob[] = ids.map((id, i) => ({
      id,
      uid: uids[i]!,
      kind: chaosSleep.kind,
      state: 'completed',
    }));
    const ended = () => workers.reduce((n, w) => n + w.lines().filter((l) => l.event === 'end').length, 0);

    const rounds: {
      at: number;
      terminated: Record<string, number>;
      refusedStillAlive: number[];
      leaderHit: boolean;
    }[] = [];
    for (const threshold of [60, 180, 300, 420]) {
      await waitFor(
        `${threshold} attempts to end`,
        () => {
          assertNoCrash(workers);
          return ended() >= threshold;
        },
        30_000,
        10,
      );
      // Every worker is listening again and a leader is connected, so each round cuts every kind of
      // connection.
      await waitFor(
        'every worker listening and a leader connected',
        async () => {
          const b = await backends();
          return b['awa-listen'] === workers.length && b['awa-leader'] === 1;
        },
        15_000,
      );
      const [holder, ...others] = await leaderLockHolders(pool);
      expect(others).toEqual([]);
      const at = Date.now();
      const { rows } = await pool.query<{ ok: boolean; app: string; pid: number }>(
        `select pg_terminate_backend(pid) as ok, application_name as app, pid from pg_stat_activity
          where datname = $1 and application_name = any($2::text[])`,
        [db.name, WORKER_APPS],
      );
      const terminated: Record<string, number> = {};
      for (const r of rows) if (r.ok) terminated[r.app] = (terminated[r.app] ?? 0) + 1;
      // A refusal means the backend was gone by the time its turn came (a pool closing an idle client
      // between the statement's snapshot of pg_stat_activity and the call); it must not still be there.
      const refused = rows.filter((r) => !r.ok).map((r) => r.pid);
      const alive = await pool.query<{ pid: number }>(
        `select pid from pg_stat_activity where pid = any($1::int[])`,
        [refused],
      );
      rounds.push({
        at,
        terminated,
        refusedStillAlive: alive.rows.map((r) => r.pid),
        leaderHit: rows.some((r) => r.ok && r.pid === holder?.pid),
      });
      await sleep(50);
    }
    await waitForTerminal(client, ['chaos'], N, 45_000, workers);

    // Every process is back: one LISTEN connection each, and one leader among them.
    await waitFor(
      'each worker to be listening again and one leader connected',
      async () => {
        const b = await backends();
        return b['awa-listen'] === workers.length && b['awa-leader'] === 1;
      },
      15_000,
      100,
    );
    // A fresh wave is picked up after the damage.
    const waveUids = Array.from({ length: 30 }, (_, i) => `term-wave-${i}`);
    const waveIds = (
      await client.enqueueMany(waveUids.map((uid) => ({ kind: chaosSleep, args: { uid, sleepMs: 0 } })))
    ).map((r) => r.id);
    const waveAt = Date.now();
    await waitForTerminal(client, ['chaos'], N + waveUids.length, 20_000, workers);
    const waveMs = Date.now() - waveAt;
    await Promise.all(workers.map((w) => w.stop()));

    const all = [
      ...expected,
      ...waveIds.map((id, i) => ({
        id,
        uid: waveUids[i]!,
        kind: chaosSleep.kind,
        state: 'completed' as const,
      })),
    ];
    const report = await verifyRun(client, all, workers, { allowWorkerErrors: true });
    const lines = workers.flatMap((w) => w.lines());
    printReport('terminate-backends', report, {
      workers: workers.length,
      rounds: JSON.stringify(rounds.map((r) => r.terminated)),
      leadershipChanges: lines.filter((l) => l.event === 'leadership').length,
      waveMs,
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: all.length, completed: all.length, failed: 0, lost: 0 });
    // The damage was real: every backend a round named was cut (or had already ended on its own), and each
    // round cut every worker's LISTEN connection, the leader's connection and pool connections.
    for (const r of rounds) {
      expect(r.refusedStillAlive).toEqual([]);
      expect(r.terminated['awa-listen']).toBe(workers.length);
      // The backend holding the leader lock, not just a host standing for election.
      expect(r.leaderHit).toBe(true);
      expect(r.terminated['awa-worker']).toBeGreaterThanOrEqual(workers.length);
    }
    // …and every worker noticed each round: an error logged after that round's termination and before
    // the next one.
    for (const [i, r] of rounds.entries()) {
      const until = rounds[i + 1]?.at ?? Number.POSITIVE_INFINITY;
      for (const w of workers)
        expect({
          round: i,
          worker: w.instanceId,
          noticed: w.lines().some((l) => l.event === 'error' && l.t >= r.at && l.t < until),
        }).toEqual({ round: i, worker: w.instanceId, noticed: true });
    }
  }, 60_000);
});
