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
  verifyRun,
  waitFor,
  waitForTerminal,
  workerConfig,
  type ExpectedJob,
  openScene,
  closeScene,
  type Scene,
} from './harness.js';

const RING = /^(ready_entries|claim_batches|closure_batches)_\d+$/;

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
      const ids = await client.enqueueMany(uids.map((uid) => ({ kind: chaosSleep, args: { uid } })));
      expected.push(
        ...ids.map((id, i) => ({ id, uid: uids[i]!, kind: chaosSleep.kind, state: 'completed' as const })),
      );
      await waitForTerminal(client, ['chaos'], expected.length, 40_000, workers);
      await sleep(300); // let the leader rotate the ring between waves
    }
    // Stopping the workers ends their backends, which flushes their table statistics.
    await Promise.all(workers.map((w) => w.stop()));
    expect(await pinnedXmin()).toBe(xminBefore);

    const report = await verifyRun(client, expected, workers);
    await pool.query('select pg_stat_clear_snapshot()');
    const { rows: stats } = await pool.query<{
      relname: string;
      n_dead_tup: string;
      n_tup_upd: string;
      n_tup_del: string;
      n_tup_ins: string;
    }>(
      `select relname, n_dead_tup::text, n_tup_upd::text, n_tup_del::text, n_tup_ins::text
         from pg_stat_user_tables where schemaname = 'awa' order by relname`,
    );
    const ring = stats.filter((s) => RING.test(s.relname));
    const sum = (rows: typeof stats, f: 'n_dead_tup' | 'n_tup_upd' | 'n_tup_del' | 'n_tup_ins') =>
      rows.reduce((n, r) => n + Number(r[f]), 0);
    const byFamily: Record<string, { ins: number; dead: number }> = {};
    for (const s of ring) {
      const family = s.relname.replace(/_\d+$/, '');
      byFamily[family] ??= { ins: 0, dead: 0 };
      byFamily[family].ins += Number(s.n_tup_ins);
      byFamily[family].dead += Number(s.n_dead_tup);
    }
    const others = Object.fromEntries(
      stats
        .filter((s) => !RING.test(s.relname) && Number(s.n_dead_tup) > 0)
        .map((s) => [s.relname, Number(s.n_dead_tup)]),
    );
    printReport('pinned-horizon', report, {
      workers: workers.length,
      pinnedXid: xid[0]!.xid,
      ringTables: ring.length,
      ringDeadTuples: JSON.stringify(byFamily),
      otherTablesWithDeadTuples: JSON.stringify(others),
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: WAVES * PER_WAVE, completed: WAVES * PER_WAVE, failed: 0, lost: 0 });
    expect(ring.length).toBe(48);
    expect(sum(ring, 'n_tup_ins')).toBeGreaterThan(0);
    expect({
      dead: sum(ring, 'n_dead_tup'),
      updated: sum(ring, 'n_tup_upd'),
      deleted: sum(ring, 'n_tup_del'),
    }).toEqual({ dead: 0, updated: 0, deleted: 0 });
    // The snapshot was held throughout.
    await holder.query('select 1');
    expect(await pinnedXmin()).toBe(xminBefore);
    await holder.query('rollback');
  }, 60_000);
});
