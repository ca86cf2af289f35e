// Chaos: the PostgreSQL server restarts in the middle of a run. The server is one this test owns (the
// embedded launcher, on its own port and data directory), never the shared server other tests use. The
// workers reconnect with backoff, re-LISTEN, settle or get rescued whatever was in flight, and finish.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { EmbeddedPostgres } from '../../src/embedded/launcher.js';
import type { AwaClient } from '../../src/index.js';
import { chaosSleep } from '../fixtures/chaos-jobs.js';
import {
  assertNoCrash,
  ChaosWorker,
  logDir,
  newClient,
  printReport,
  waitFor,
  waitForTerminal,
  workerConfig,
} from './harness.js';
import { verifyRun, type ExpectedJob } from './invariants.js';

describe('chaos: PostgreSQL restarts mid-run', () => {
  let server: EmbeddedPostgres;
  let url: string;
  let client: AwaClient;
  let logs: ReturnType<typeof logDir>;
  const workers: ChaosWorker[] = [];

  beforeAll(async () => {
    server = await EmbeddedPostgres.start();
    const u = new URL(server.url);
    u.pathname = '/awa_chaos_restart';
    url = u.toString();
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query('create database awa_chaos_restart');
    await admin.end();
    client = await newClient(url);
    logs = logDir('restart');
  }, 120_000);
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.dispose()));
    await client?.close().catch(() => {});
    await server?.destroy();
    logs?.remove();
  }, 60_000);

  it('restart() of the server mid-run: workers reconnect with backoff and finish; nothing is lost', async () => {
    workers.push(
      ...(await Promise.all(
        ['pg-a', 'pg-b'].map((id) =>
          ChaosWorker.spawn(
            logs.dir,
            workerConfig(url, id, { sleepMs: 100, queues: { chaos: { concurrency: 6 } } }),
          ),
        ),
      )),
    );
    await waitFor('a leader', () => workers.some((w) => w.isLeader()), 10_000);
    const N = 400;
    const uids = Array.from({ length: N }, (_, i) => `restart-${i}`);
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
    await waitFor(
      'a third of the jobs to run',
      () => {
        assertNoCrash(workers);
        return ended() >= N / 3;
      },
      30_000,
      10,
    );
    const restartAt = Date.now();
    await server.restart();
    const restartMs = Date.now() - restartAt;
    await waitForTerminal(client, ['chaos'], N, 45_000, workers);
    const doneMs = Date.now() - restartAt;
    // Both processes are back on the new server: LISTEN connections and one leader.
    const probe = new pg.Client({ connectionString: url });
    await probe.connect();
    try {
      await waitFor(
        'both workers listening and one leader connected',
        async () => {
          const { rows } = await probe.query<{ a: string; n: string }>(
            `select application_name as a, count(*)::text as n from pg_stat_activity
              where datname = 'awa_chaos_restart' and application_name in ('awa-listen', 'awa-leader') group by 1`,
          );
          const n = Object.fromEntries(rows.map((r) => [r.a, Number(r.n)]));
          return n['awa-listen'] === workers.length && n['awa-leader'] === 1;
        },
        15_000,
        100,
      );
    } finally {
      await probe.end();
    }
    await Promise.all(workers.map((w) => w.stop()));

    // Heartbeats cannot land while the server is down, so attempts of live workers may be rescued after
    // it comes back: tolerated, but every other check holds (fenced, counted, no overlap).
    const report = await verifyRun(client, expected, workers, {
      allowRescueOfLiveWorkers: true,
      allowWorkerErrors: true,
    });
    printReport('pg-restart', report, {
      workers: workers.length,
      restartMs,
      restartToAllDoneMs: doneMs,
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: N, completed: N, failed: 0, lost: 0 });
    for (const w of workers)
      expect(w.lines().some((l) => l.event === 'error' && l.t >= restartAt)).toBe(true);
  }, 90_000);
});
