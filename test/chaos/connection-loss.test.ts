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

  const backends = async (): Promise<Record<string, number>> => {
    const { rows } = await pool.query<{ application_name: string; n: string }>(
      `select application_name, count(*) as n from pg_stat_activity
        where datname = $1 and application_name like 'awa-%' group by 1`,
      [db.name],
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
    const ids = await client.enqueueMany(uids.map((uid) => ({ kind: chaosSleep, args: { uid } })));
    const expected: ExpectedJob[] = ids.map((id, i) => ({
      id,
      uid: uids[i]!,
      kind: chaosSleep.kind,
      state: 'completed',
    }));
    const ended = () => workers.reduce((n, w) => n + w.lines().filter((l) => l.event === 'end').length, 0);

    const terminated: number[] = [];
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
      const { rows } = await pool.query<{ pid: number }>(
        `select pg_terminate_backend(pid), pid from pg_stat_activity
          where datname = $1 and pid <> pg_backend_pid() and application_name <> 'chaos-test'`,
        [db.name],
      );
      terminated.push(rows.length);
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
    const waveIds = await client.enqueueMany(
      waveUids.map((uid) => ({ kind: chaosSleep, args: { uid, sleepMs: 0 } })),
    );
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
      terminations: JSON.stringify(terminated),
      leadershipChanges: lines.filter((l) => l.event === 'leadership').length,
      waveMs,
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: all.length, completed: all.length, failed: 0, lost: 0 });
    // The damage was real: every round hit the workers' connections, and they noticed.
    for (const n of terminated) expect(n).toBeGreaterThanOrEqual(workers.length);
    for (const w of workers) expect(w.lines().some((l) => l.event === 'error')).toBe(true);
  }, 60_000);
});
