// Chaos: concurrent producers in their own transactions (issue 9, item 2), against worker host processes.
// Producers take lane positions without waiting for each other; a claim skips positions whose producer is
// still in flight, claims them once they commit, and passes positions whose producer rolled back or died
// (docs/architecture.md, "Lanes, gaps and the floor"). Two scenes, each with two worker host processes:
//   1. one producer holds its transaction open ~10 s while others commit 3,000 jobs: those are picked up at
//      normal latency (not after the 10 s), then the held job runs once it commits;
//   2. producers loop begin → enqueueMany (one job or several) → ledger row in the same transaction →
//      commit or rollback, while a killer terminates producer backends mid-transaction: the ledger (what
//      committed, by the database's word) is exactly the set of jobs that exist, ran, and completed once,
//      and every lane's floor reaches its high-water afterwards.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient, Priority } from '../../src/index.js';
import { chaosSleep } from '../fixtures/chaos-jobs.js';
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
import { until } from '../helpers/wait.js';

/** application_name of the test's producer sessions: the killer terminates only these. */
const PRODUCER_APP = 'chaos-producer';

interface LaneCursors {
  laneId: number;
  priority: number;
  enq: number;
  high: number;
  floor: number;
}

/** The lanes' sequences: last position handed out, claimed high-water, floor. */
async function laneCursors(pool: pg.Pool, queue: string): Promise<LaneCursors[]> {
  const { rows } = await pool.query<LaneCursors>(
    `select lane_id as "laneId", priority,
            coalesce(pg_sequence_last_value(enqueue_seq), 0)::int as enq,
            coalesce(pg_sequence_last_value(claim_seq), 0)::int as high,
            coalesce(pg_sequence_last_value(floor_seq), 0)::int as floor
       from awa.lanes where queue = $1 order by priority, bulk`,
    [queue],
  );
  return rows;
}

async function jobIdHighWater(pool: pg.Pool): Promise<bigint> {
  const { rows } = await pool.query<{ v: string }>(
    `select coalesce(pg_sequence_last_value('awa.job_id_seq'), 0)::text as v`,
  );
  return BigInt(rows[0]!.v);
}

async function producerConnection(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, application_name: PRODUCER_APP });
  // A terminated backend: the pending query rejects and the caller reconnects; the event itself is noise.
  c.on('error', () => {});
  await c.connect();
  return c;
}

function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function starts(workers: readonly ChaosWorker[], uidPrefix: string): AttemptLine[] {
  return workers
    .flatMap((w) => w.lines())
    .filter((l): l is AttemptLine => l.event === 'start' && l.uid.startsWith(uidPrefix));
}

function ends(workers: readonly ChaosWorker[], uidPrefix: string): AttemptLine[] {
  return workers
    .flatMap((w) => w.lines())
    .filter((l): l is AttemptLine => l.event === 'end' && l.uid.startsWith(uidPrefix));
}

/** Fails with `what` when `work` takes longer than `ms` (e.g. producers queued behind an open transaction). */
async function within<T>(what: string, ms: number, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

describe('chaos: concurrent producers in their own transactions', () => {
  let scene: Scene | undefined;
  let db: Scene['db'];
  let client: AwaClient;
  let pool: pg.Pool;
  /** Every worker process spawned, for the teardown. */
  const all: ChaosWorker[] = [];
  const producers = new Set<pg.Client>();

  /** Two worker host processes serving `queue`. Each scene stops its own before reading the final state, as
   * the other chaos scenes do: with the leader still pruning, getJob returned null for 6 completed jobs of
   * the first scene (about 1 run in 3) while the prune of their slot ran, and completed 3 s later (probably
   * because TRUNCATE is not MVCC-safe: a read whose snapshot predates the prune sees the slot empty and not
   * yet the history the prune wrote). That transient miss is reported separately; this file proves the
   * producers' guarantees. */
  const spawnWorkers = async (label: string, queue: string): Promise<ChaosWorker[]> => {
    const run = await Promise.all(
      ['a', 'b'].map((x) =>
        ChaosWorker.spawn(
          scene!.logs.dir,
          workerConfig(db.url, `${label}-${x}`, { queues: { [queue]: { concurrency: 8 } } }),
        ),
      ),
    );
    all.push(...run);
    return run;
  };

  beforeAll(async () => {
    scene = await openScene('producers');
    ({ db, client, pool } = scene);
  });
  afterAll(async () => {
    await Promise.all([...producers].map((c) => c.end().catch(() => {})));
    await closeScene(scene, all);
  });

  it('a producer holding its transaction open 10 s holds back neither the other producers nor the pickup of their 3,000 jobs; its own job runs once when it commits', async () => {
    const HOLD_MS = 10_000;
    const PRODUCERS = 4;
    const TXS = 150; // per producer
    const PER_TX = 5;
    const SPREAD_MS = 8_000;
    const N = PRODUCERS * TXS * PER_TX;
    const workers = await spawnWorkers('held', 'chaos');

    // The long producer: one job, then its transaction stays open (it holds a transaction id).
    const held = await producerConnection(db.url);
    producers.add(held);
    await held.query('begin');
    const heldAt = Date.now();
    const [longRes] = await client.enqueueMany([{ kind: chaosSleep, args: { uid: 'long-0' } }], {
      client: held,
    });
    const longId = longRes!.id;
    // Its position, read inside its own transaction (no one else sees the row yet).
    const { rows: posRows } = await held.query<{ laneId: number; seq: number; pid: number }>(
      `select lane_id as "laneId", lane_seq::int as seq, pg_backend_pid() as pid
         from awa.ready_entries where job_id = $1`,
      [longId],
    );
    const longPos = posRows[0]!;

    // The others: each on its own connection, a transaction per batch, paced over SPREAD_MS. The commit
    // time is taken here, after COMMIT returned; the handler's start time comes from the worker's log line
    // (same machine, same clock).
    const commitAt = new Map<string, number>();
    const uidOf = new Map<string, string>();
    const t0 = Date.now();
    const producing = Promise.all(
      Array.from({ length: PRODUCERS }, async (_, p) => {
        const c = await producerConnection(db.url);
        producers.add(c);
        try {
          for (let i = 0; i < TXS; i++) {
            const due = t0 + (i * SPREAD_MS) / TXS;
            if (Date.now() < due) await sleep(due - Date.now());
            const uids = Array.from({ length: PER_TX }, (_, k) => `busy-${p}-${i}-${k}`);
            await c.query('begin');
            const res = await client.enqueueMany(
              uids.map((uid) => ({ kind: chaosSleep, args: { uid } })),
              { client: c },
            );
            await c.query('commit');
            const at = Date.now();
            res.forEach((r, k) => {
              commitAt.set(r.id, at);
              uidOf.set(r.id, uids[k]!);
            });
          }
        } finally {
          producers.delete(c);
          await c.end();
        }
      }),
    );
    await within(
      `${PRODUCERS} producers committing ${N} jobs while one transaction stays open`,
      30_000,
      producing,
    );
    const producedMs = Date.now() - t0;
    expect(commitAt.size).toBe(N);

    // All of them run while the long transaction is still open.
    await waitForTerminal(client, ['chaos'], N, 20_000, workers);
    const { rows: act } = await pool.query<{ xid: string | null }>(
      `select backend_xid::text as xid from pg_stat_activity where pid = $1`,
      [longPos.pid],
    );
    expect(act[0]?.xid, 'the long producer still holds its open transaction').toBeTruthy();
    // Its position is an open gap: the floor stays below it while the high-water went past it.
    const during = (await laneCursors(pool, 'chaos')).find((l) => l.laneId === longPos.laneId)!;
    expect(during.floor, "the floor passed the open producer's position").toBeLessThan(longPos.seq);
    expect(during.high, "claims went past the open producer's position").toBeGreaterThan(longPos.seq);

    if (Date.now() < heldAt + HOLD_MS) await sleep(heldAt + HOLD_MS - Date.now());
    await held.query('commit');
    const longCommitAt = Date.now();
    producers.delete(held);
    await held.end();
    const heldMs = longCommitAt - heldAt;

    let lastState = 'unknown';
    try {
      await until(
        "the long producer's job to complete after its commit",
        async () => {
          const j = await client.getJob(longId);
          lastState = j?.state ?? 'missing';
          return j?.state === 'completed';
        },
        15_000,
      );
    } catch (err) {
      throw new Error(`${(err as Error).message}: job ${longId} is ${lastState}`);
    }

    // Once claimed, the long job's position no longer holds the floor back.
    await until(
      "the floor of the long producer's lane to reach its high-water",
      async () => {
        const l = (await laneCursors(pool, 'chaos')).find((x) => x.laneId === longPos.laneId)!;
        return l.floor === l.high && l.high === l.enq;
      },
      60_000,
    );
    await Promise.all(workers.map((w) => w.stop()));

    // Each of the 3,000 started exactly once, and ended before the long producer committed.
    const busyStarts = starts(workers, 'busy-');
    const perJob = new Map<string, number>();
    for (const s of busyStarts) perJob.set(s.id, (perJob.get(s.id) ?? 0) + 1);
    expect(perJob.size).toBe(N);
    expect([...perJob].filter(([, n]) => n !== 1)).toEqual([]);
    const lateEnds = ends(workers, 'busy-').filter((e) => e.t >= longCommitAt);
    expect(lateEnds.length, 'jobs that ran only after the long producer committed').toBe(0);

    const pickup = busyStarts.map((s) => s.t - commitAt.get(s.id)!).sort((a, b) => a - b);
    const p50 = percentile(pickup, 0.5);
    const p99 = percentile(pickup, 0.99);
    const longStarts = starts(workers, 'long-');
    expect(longStarts).toHaveLength(1);

    const expected: ExpectedJob[] = [
      ...[...uidOf].map(([id, uid]) => ({ id, uid, kind: chaosSleep.kind, state: 'completed' as const })),
      { id: longId, uid: 'long-0', kind: chaosSleep.kind, state: 'completed' },
    ];
    const report = await verifyRun(client, expected, workers);
    printReport('producer-held-open', report, {
      producers: PRODUCERS,
      producedMs,
      heldMs,
      pickupP50Ms: p50,
      pickupP99Ms: p99,
      pickupMaxMs: pickup.at(-1)!,
      heldJobPickupMs: longStarts[0]!.t - longCommitAt,
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: N + 1, completed: N + 1, failed: 0, lost: 0, maxAttempt: 1 });
    // Held back by the open transaction, the jobs committed early would wait up to ~10 s (p99 ~9 s), and
    // lateEnds above would not be empty. Alone this runs at p99 ~300 ms; inside the full suite on a 2-core box
    // it has reached 1.3-3.9 s (the suite's other files compete for the cores), so the bound is half the hold.
    expect(p99, `pickup p99 (p50 ${p50} ms)`).toBeLessThan(HOLD_MS / 2);
    expect(await client.getJob(longId)).toMatchObject({ state: 'completed', attempt: 1 });
  }, 90_000);

  it('producers killed or rolled back mid-transaction: exactly the jobs of the committed transactions (by a ledger in the same transactions) exist and ran once, and no lane keeps a stuck gap', async () => {
    const PRODUCERS = 4;
    const DURATION_MS = 5_000;
    const seed = Number(process.env.AWA_CHAOS_SEED ?? Date.now() % 1_000_000_007);
    const rand = mulberry32(seed);
    const workers = await spawnWorkers('churn', 'churn');

    await pool.query('create table producer_ledger (job_id bigint primary key, uid text not null)');
    // Job ids come from one sequence (cached per session): every id this scene hands out is above this mark,
    // since every producer session of the previous scene has ended.
    const idsFrom = await jobIdHighWater(pool);

    const committed = new Set<string>(); // COMMIT returned
    const rolledBack = new Set<string>(); // ROLLBACK returned
    const inDoubt = new Set<string>(); // enqueued, then the connection died before we learned the outcome
    const stats = { transactions: 0, commits: 0, rollbacks: 0, broken: 0, kills: 0 };
    const end = Date.now() + DURATION_MS;

    const produce = async (p: number) => {
      let c: pg.Client | null = null;
      for (let i = 0; Date.now() < end; i++) {
        let ids: string[] = [];
        try {
          if (!c) {
            c = await producerConnection(db.url);
            producers.add(c);
          }
          stats.transactions++;
          // Half the transactions enqueue one job (the single-row statement), half 2–20 (the enqueue()
          // function): the killer interrupts both paths.
          const n = rand() < 0.5 ? 1 : 2 + Math.floor(rand() * 19);
          const uids = Array.from({ length: n }, (_, k) => `churn-${p}-${i}-${k}`);
          await c.query('begin');
          const res = await client.enqueueMany(
            uids.map((uid) => ({
              kind: chaosSleep,
              args: { uid },
              options: { queue: 'churn', priority: (1 + Math.floor(rand() * 4)) as Priority },
            })),
            { client: c },
          );
          ids = res.map((r) => r.id);
          await c.query(
            'insert into producer_ledger (job_id, uid) select * from unnest($1::bigint[], $2::text[])',
            [ids, uids],
          );
          await sleep(Math.floor(rand() * 40));
          if (rand() < 0.2) {
            await c.query('rollback');
            for (const id of ids) rolledBack.add(id);
            stats.rollbacks++;
          } else {
            await c.query('commit');
            for (const id of ids) committed.add(id);
            stats.commits++;
          }
        } catch {
          // Terminated mid-transaction (or right after its commit): the ledger will tell.
          for (const id of ids) inDoubt.add(id);
          stats.broken++;
          if (c) {
            producers.delete(c);
            await c.end().catch(() => {});
            c = null;
          }
        }
      }
      if (c) {
        producers.delete(c);
        await c.end();
      }
    };
    const killer = async () => {
      while (Date.now() < end) {
        await sleep(150 + Math.floor(rand() * 100));
        const { rows } = await pool.query<{ ok: boolean }>(
          `select pg_terminate_backend(v.pid) as ok
             from (select pid from pg_stat_activity
                    where datname = $1 and application_name = $2 and xact_start is not null
                    order by random() limit 1) v`,
          [db.name, PRODUCER_APP],
        );
        if (rows[0]?.ok) stats.kills++;
      }
    };
    const t0 = Date.now();
    await Promise.all([killer(), ...Array.from({ length: PRODUCERS }, (_, p) => produce(p))]);
    const producedMs = Date.now() - t0;
    const idsTo = await jobIdHighWater(pool);

    // The damage was real: transactions committed, rolled back and were killed.
    expect(stats.commits).toBeGreaterThanOrEqual(20);
    expect(stats.rollbacks).toBeGreaterThanOrEqual(5);
    expect(stats.kills).toBeGreaterThanOrEqual(10);
    expect(stats.broken).toBeGreaterThanOrEqual(10);
    expect(
      inDoubt.size,
      'jobs enqueued by transactions killed before their outcome was known',
    ).toBeGreaterThan(0);

    // The ledger is the database's word on what committed; it agrees with every outcome we did learn.
    const { rows: ledgerRows } = await pool.query<{ id: string; uid: string }>(
      'select job_id::text as id, uid from producer_ledger',
    );
    const ledger = new Map(ledgerRows.map((r) => [r.id, r.uid]));
    expect([...committed].filter((id) => !ledger.has(id))).toEqual([]);
    expect([...rolledBack].filter((id) => ledger.has(id))).toEqual([]);
    expect([...ledger.keys()].filter((id) => !committed.has(id) && !inDoubt.has(id))).toEqual([]);
    expect(ledger.size).toBeGreaterThan(0);

    // Every committed job completes.
    try {
      await waitForTerminal(client, ['churn'], ledger.size, 30_000, workers);
    } catch (err) {
      const notDone: string[] = [];
      for (const id of ledger.keys()) {
        const j = await client.getJob(id);
        if (j?.state !== 'completed') notDone.push(`${id}:${j?.state ?? 'missing'}`);
      }
      throw new Error(
        `${(err as Error).message}; ${notDone.length} of the ${ledger.size} committed jobs (in the ledger) are not completed, e.g. ${sample(notDone).join(', ')}`,
      );
    }

    // No stuck gap: every lane's floor reaches its high-water, which reaches the last position handed out
    // (dead positions are passed once every transaction older than their horizon ended; other sessions on
    // the shared server can delay that).
    const floorFrom = Date.now();
    let lanes: LaneCursors[] = [];
    try {
      await until(
        'every churn lane: floor = high-water = last position',
        async () => {
          lanes = await laneCursors(pool, 'churn');
          return lanes.every((l) => l.floor === l.high && l.high === l.enq);
        },
        60_000,
      );
    } catch (err) {
      throw new Error(`${(err as Error).message}; lanes: ${JSON.stringify(lanes)}`);
    }
    const floorMs = Date.now() - floorFrom;
    expect(lanes).toHaveLength(4); // a live lane per priority (no bulk load: no bulk lanes)
    expect(lanes.reduce((n, l) => n + l.enq, 0)).toBeGreaterThan(ledger.size); // rolled-back positions too

    await Promise.all(workers.map((w) => w.stop()));

    // The queue is empty; the database counts exactly the ledger's jobs as completed.
    expect((await client.counts()).find((c) => c.queue === 'churn')).toEqual({
      queue: 'churn',
      paused: false,
      available: 0,
      running: 0,
      waiting: 0,
      scheduled: 0,
      retryable: 0,
      completed: ledger.size,
      failed: 0,
      cancelled: 0,
      dlq: 0,
      blocked: 0,
    });

    // From the database: every job id this scene could have handed out, looked up. The jobs that exist are
    // exactly the ledger's, each completed on its first attempt; nothing a rolled-back or killed
    // transaction enqueued exists.
    const scanFrom = Date.now();
    const { rows: found } = await pool.query<{ id: string; state: string; attempt: number }>(
      `select g.id::text as id, s.state, s.attempt
         from generate_series($1::bigint + 1, $2::bigint) g(id)
        cross join lateral awa.job_state(g.id) s`,
      [idsFrom.toString(), idsTo.toString()],
    );
    const scanMs = Date.now() - scanFrom;
    const foundIds = new Set(found.map((r) => r.id));
    expect({
      committedButMissing: sample([...ledger.keys()].filter((id) => !foundIds.has(id))),
      existingOutsideLedger: sample(found.filter((r) => !ledger.has(r.id)).map((r) => `${r.id}:${r.state}`)),
      notCompletedOnce: sample(
        found
          .filter((r) => ledger.has(r.id) && (r.state !== 'completed' || r.attempt !== 1))
          .map((r) => `${r.id}:${r.state}@${r.attempt}`),
      ),
    }).toEqual({ committedButMissing: [], existingOutsideLedger: [], notCompletedOnce: [] });
    expect(found).toHaveLength(ledger.size);

    // From the workers' logs: handlers started only for ledger jobs, each exactly once.
    const churnStarts = starts(workers, 'churn-');
    const perJob = new Map<string, number>();
    for (const s of churnStarts) perJob.set(s.id, (perJob.get(s.id) ?? 0) + 1);
    expect({
      ranOutsideLedger: sample(churnStarts.filter((s) => !ledger.has(s.id)).map((s) => `${s.id}:${s.uid}`)),
      ranMoreThanOnce: sample([...perJob].filter(([, n]) => n > 1).map(([id, n]) => `${id}x${n}`)),
      neverRan: sample([...ledger.keys()].filter((id) => !perJob.has(id))),
    }).toEqual({ ranOutsideLedger: [], ranMoreThanOnce: [], neverRan: [] });

    const expected: ExpectedJob[] = [...ledger].map(([id, uid]) => ({
      id,
      uid,
      kind: chaosSleep.kind,
      state: 'completed' as const,
    }));
    const report = await verifyRun(client, expected, workers);
    printReport('producers-killed-rolled-back', report, {
      seed,
      ...stats,
      inDoubtJobs: inDoubt.size,
      inDoubtCommitted: [...inDoubt].filter((id) => ledger.has(id)).length,
      ledgerJobs: ledger.size,
      idRange: Number(idsTo - idsFrom),
      producedMs,
      floorMs,
      scanMs,
      positions: lanes.reduce((n, l) => n + l.enq, 0),
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({
      jobs: ledger.size,
      completed: ledger.size,
      failed: 0,
      lost: 0,
      maxAttempt: 1,
      rescued: 0,
    });
  }, 120_000);
});
