// Chaos: a mixed load against two worker host processes (issue 30, item 4). Bulk loaders COPY blocks of
// a hundred to a thousand jobs in transactions they sometimes hold open and sometimes roll back, while
// application producers enqueue one to three jobs per transaction (a tenth rolled back) and long jobs hold
// permits; bulk blocks commit late past each other and past the singles. Every transaction writes the uids of
// its jobs to a ledger in the same transaction, so the ledger is the database's word on what committed: exactly
// those jobs run, each once, and every lane's floor reaches its last position afterwards (no stuck gap).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import { chaosSleep } from '../fixtures/chaos-jobs.js';
import { until } from '../helpers/wait.js';
import {
  ChaosWorker,
  closeScene,
  mulberry32,
  openScene,
  printReport,
  sample,
  sleep,
  waitForTerminal,
  workerConfig,
  type AttemptLine,
  type Scene,
} from './harness.js';
import { verifyRun, type ExpectedJob } from './invariants.js';

const QUEUE = 'mixed';
const DURATION_MS = 5_000;
const LONG_JOBS = 3;

describe('chaos: bulk loads beside application producers and long jobs', () => {
  let scene: Scene | undefined;
  let client: AwaClient;
  let pool: pg.Pool;
  const workers: ChaosWorker[] = [];
  const connections = new Set<pg.Client>();

  beforeAll(async () => {
    scene = await openScene('mixed');
    ({ client, pool } = scene);
  });
  afterAll(async () => {
    await Promise.all([...connections].map((c) => c.end().catch(() => {})));
    await closeScene(scene, workers);
  });

  const connect = async () => {
    const c = new pg.Client({ connectionString: scene!.db.url, application_name: 'chaos-mixed' });
    await c.connect();
    connections.add(c);
    return c;
  };

  it('interleaved COPYs, single producers, rollbacks and long jobs across two processes: every committed job (by a ledger in the same transactions) runs exactly once, nothing else runs', async () => {
    const seed = Number(process.env.AWA_CHAOS_SEED ?? Date.now() % 1_000_000_007);
    const rand = mulberry32(seed);
    workers.push(
      ...(await Promise.all(
        ['a', 'b'].map((x) =>
          ChaosWorker.spawn(
            scene!.logs.dir,
            workerConfig(scene!.db.url, `mixed-${x}`, { queues: { [QUEUE]: { concurrency: 12 } } }),
          ),
        ),
      )),
    );
    await pool.query('create table mixed_ledger (uid text primary key)');
    const inLedger = async (c: pg.ClientBase, uids: string[]) =>
      c.query('insert into mixed_ledger (uid) select unnest($1::text[])', [uids]);

    // Long jobs first: they hold permits in both processes for most of the run.
    const longUids = Array.from({ length: LONG_JOBS }, (_, i) => `long-${i}`);
    await client.enqueueMany(
      longUids.map((uid) => ({ kind: chaosSleep, args: { uid, sleepMs: 3_000 }, options: { queue: QUEUE } })),
    );
    await pool.query('insert into mixed_ledger (uid) select unnest($1::text[])', [longUids]);

    const stats = { loads: 0, loadsRolledBack: 0, singles: 0, singlesRolledBack: 0 };
    const end = Date.now() + DURATION_MS;
    const bulkLoader = async (p: number) => {
      const c = await connect();
      for (let i = 0; Date.now() < end; i++) {
        const n = 100 + Math.floor(rand() * 900);
        const uids = Array.from({ length: n }, (_, k) => `bulk-${p}-${i}-${k}`);
        await c.query('begin');
        await client.copyEnqueue(
          uids.map((uid) => ({ kind: chaosSleep, args: { uid }, options: { queue: QUEUE } })),
          { client: c, chunkSize: 500 },
        );
        await inLedger(c, uids);
        await sleep(Math.floor(rand() * 400)); // held open while others commit past it
        if (rand() < 0.2) {
          await c.query('rollback');
          stats.loadsRolledBack++;
        } else {
          await c.query('commit');
          stats.loads++;
        }
      }
    };
    const producer = async (p: number) => {
      const c = await connect();
      for (let i = 0; Date.now() < end; i++) {
        const uids = Array.from({ length: 1 + Math.floor(rand() * 3) }, (_, k) => `single-${p}-${i}-${k}`);
        await c.query('begin');
        await client.enqueueMany(
          uids.map((uid) => ({ kind: chaosSleep, args: { uid }, options: { queue: QUEUE } })),
          { client: c },
        );
        await inLedger(c, uids);
        await sleep(Math.floor(rand() * 30));
        if (rand() < 0.1) {
          await c.query('rollback');
          stats.singlesRolledBack++;
        } else {
          await c.query('commit');
          stats.singles++;
        }
      }
    };
    const t0 = Date.now();
    await Promise.all([0, 1].map(bulkLoader).concat([0, 1, 2].map(producer)));
    const producedMs = Date.now() - t0;

    // The damage was real: loads and singles both committed and rolled back.
    expect(stats.loads).toBeGreaterThanOrEqual(3);
    expect(stats.loadsRolledBack + stats.singlesRolledBack).toBeGreaterThanOrEqual(3);
    expect(stats.singles).toBeGreaterThanOrEqual(30);

    const { rows: ledgerRows } = await pool.query<{ uid: string }>('select uid from mixed_ledger');
    const ledger = new Set(ledgerRows.map((r) => r.uid));
    await waitForTerminal(client, [QUEUE], ledger.size, 60_000, workers);

    // From the workers' logs: handlers started for ledger jobs only, each exactly once.
    const started = workers.flatMap((w) => w.lines()).filter((l): l is AttemptLine => l.event === 'start');
    const runs = new Map<string, AttemptLine[]>();
    for (const s of started) runs.set(s.uid, [...(runs.get(s.uid) ?? []), s]);
    expect({
      ranOutsideLedger: sample(started.filter((s) => !ledger.has(s.uid)).map((s) => s.uid)),
      ranMoreThanOnce: sample(
        [...runs].filter(([, r]) => r.length > 1).map(([uid, r]) => `${uid}x${r.length}`),
      ),
      neverRan: sample([...ledger].filter((uid) => !runs.has(uid))),
    }).toEqual({ ranOutsideLedger: [], ranMoreThanOnce: [], neverRan: [] });

    // No stuck gap: every lane of the queue (live and bulk) has its floor at its last position.
    await until(
      'every lane: floor = high-water = last position',
      async () => {
        const { rows } = await pool.query<{ stuck: number }>(
          `select count(*)::int as stuck from awa.lanes
            where queue = $1 and not (pg_sequence_last_value(floor_seq) = pg_sequence_last_value(claim_seq)
                                      and pg_sequence_last_value(claim_seq) = pg_sequence_last_value(enqueue_seq))`,
          [QUEUE],
        );
        return rows[0]!.stuck === 0;
      },
      60_000,
    );
    await Promise.all(workers.map((w) => w.stop()));
    expect((await client.counts()).find((c) => c.queue === QUEUE)).toMatchObject({
      available: 0,
      running: 0,
      completed: ledger.size,
      failed: 0,
    });

    const expected: ExpectedJob[] = [...runs].map(([uid, [s]]) => ({
      id: s!.id,
      uid,
      kind: chaosSleep.kind,
      state: 'completed' as const,
    }));
    const report = await verifyRun(client, expected, workers);
    printReport('mixed-load', report, { seed, ...stats, ledgerJobs: ledger.size, producedMs });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: ledger.size, completed: ledger.size, lost: 0, maxAttempt: 1 });
  }, 120_000);
});
