// Chaos: a REPEATABLE READ transaction holds its snapshot (and an xid) for the whole run, pinning the
// MVCC horizon. Everything completes, and the ring tables on the claim/complete loop carry no dead
// tuples at the end, because nothing on that loop updates or deletes their rows.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { AwaClient } from '../../src/index.js';
import { chaosSleep } from '../fixtures/chaos-jobs.js';
import {
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
import { readTableStats, sumOf, waitForSessionsToEnd } from '../helpers/table-stats.js';

const RING = /^(ready_entries|claim_batches|closure_batches)_\d+$/;
const READY = /^ready_entries_\d+$/;
const RECEIPTS = /^claim_batches_\d+$/;
const CLOSURES = /^closure_batches_\d+$/;

describe('chaos: a long REPEATABLE READ transaction pins the horizon', () => {
  let db: Scene['db'];
  let client: AwaClient;
  let pool: pg.Pool;
  let holder: pg.Client;
  let logs: Scene['logs'];
  const workers: ChaosWorker[] = [];

  let scene: Scene | undefined;
  beforeAll(async () => {
    scene = await openScene('pinned');
    ({ db, client, pool, logs } = scene);
  });
  afterAll(async () => {
    await holder?.end().catch(() => {});
    await closeScene(scene, workers);
  });

  it('everything completes under a pinned snapshot; no dead tuples on ready_entries/claim_batches/closure_batches', async () => {
    holder = new pg.Client({ connectionString: db.url, application_name: 'chaos-holder' });
    await holder.connect();
    await holder.query('begin isolation level repeatable read');
    const { rows: xid } = await holder.query<{ xid: string }>('select txid_current()::text as xid');
    await holder.query('select count(*) from awa.schema_version');
    const pinnedXmin = async () =>
      (
        await pool.query<{ xmin: string | null }>(
          `select backend_xmin::text as xmin from pg_stat_activity where application_name = 'chaos-holder' and datname = $1`,
          [db.name],
        )
      ).rows[0]?.xmin ?? null;
    const xminBefore = await pinnedXmin();
    expect(xminBefore).not.toBeNull();

    workers.push(
      ...(await Promise.all(
        ['pin-a', 'pin-b'].map((id) =>
          ChaosWorker.spawn(
            logs.dir,
            workerConfig(db.url, id, {
              sleepMs: 5,
              ringIntervalMs: 200,
              queues: { chaos: { concurrency: 20 } },
            }),
          ),
        ),
      )),
    );
    await waitFor('a leader', () => workers.some((w) => w.isLeader()), 10_000);
    const WAVES = 4;
    const PER_WAVE = 500;
    const expected: ExpectedJob[] = [];
    for (let wave = 0; wave < WAVES; wave++) {
      const uids = Array.from({ length: PER_WAVE }, (_, i) => `pin-${wave}-${i}`);
      const ids = (await client.enqueueMany(uids.map((uid) => ({ kind: chaosSleep, args: { uid } })))).map(
        (r) => r.id,
      );
      expected.push(
        ...ids.map((id, i) => ({ id, uid: uids[i]!, kind: chaosSleep.kind, state: 'completed' as const })),
      );
      await waitForTerminal(client, ['chaos'], expected.length, 40_000, workers);
      await sleep(300); // let the leader rotate the ring between waves
    }
    // Stopping the workers ends their backends; their statistics are certain to be counted once their
    // sessions are gone.
    await Promise.all(workers.map((w) => w.stop()));
    expect(await pinnedXmin()).toBe(xminBefore);

    const report = await verifyRun(client, expected, workers);
    // The database's own view: every job completed, nothing waiting or running.
    expect((await client.counts()).find((c) => c.queue === 'chaos')).toEqual({
      queue: 'chaos',
      paused: false,
      available: 0,
      running: 0,
      waiting: 0,
      scheduled: 0,
      retryable: 0,
      completed: WAVES * PER_WAVE,
      failed: 0,
      cancelled: 0,
      dlq: 0,
      blocked: 0,
    });
    // The test's producer sessions too: only the snapshot holder and the read-only query pool stay.
    await scene!.closeClient();
    await waitForSessionsToEnd(db.url, ['chaos-holder', 'chaos-test']);
    const stats = await readTableStats(db.url);
    const ring = [...stats.values()].filter((s) => RING.test(s.relname));
    const byFamily: Record<string, { ins: number; dead: number }> = {};
    for (const s of ring) {
      const family = s.relname.replace(/_\d+$/, '');
      byFamily[family] ??= { ins: 0, dead: 0 };
      byFamily[family].ins += s.ins;
      byFamily[family].dead += s.dead;
    }
    const others = Object.fromEntries(
      [...stats.values()].filter((s) => !RING.test(s.relname) && s.dead > 0).map((s) => [s.relname, s.dead]),
    );
    printReport('pinned-horizon', report, {
      workers: workers.length,
      pinnedXid: xid[0]!.xid,
      ringTables: ring.length,
      ringDeadTuples: JSON.stringify(byFamily),
      otherTablesWithDeadTuples: JSON.stringify(others),
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({
      jobs: WAVES * PER_WAVE,
      completed: WAVES * PER_WAVE,
      failed: 0,
      lost: 0,
      maxAttempt: 1,
      rescued: 0,
    });
    expect(ring.length).toBe(48);
    // One ready row per job (each ran once): every insert is counted, so the zeros below are complete.
    expect(sumOf(stats, READY, 'ins')).toBe(WAVES * PER_WAVE);
    expect(sumOf(stats, RECEIPTS, 'ins')).toBeGreaterThan(0);
    expect(sumOf(stats, CLOSURES, 'ins')).toBeGreaterThan(0);
    expect({
      dead: sumOf(stats, RING, 'dead'),
      updated: sumOf(stats, RING, 'upd'),
      deleted: sumOf(stats, RING, 'del'),
    }).toEqual({ dead: 0, updated: 0, deleted: 0 });
    // The snapshot was held throughout.
    await holder.query('select 1');
    expect(await pinnedXmin()).toBe(xminBefore);
    await holder.query('rollback');
  }, 60_000);
});
