// Chaos with a history checker (test/model/history-check.ts): the concurrent histories of test/model run
// across processes and across a server restart. (1) Producers of the test (one, many, COPY; a sixth rolled
// back; their backends terminated now and then) feed two worker host processes, one of which is SIGKILLed
// mid-run and replaced; the workers' own logs (attempt starts, settlement verdicts, rescues) join the
// producers' history. (2) In-process producers, claimers and a leader against a server this test owns, which
// restarts mid-run. Both histories must pass every check, and the first also the chaos suite's verifyRun.
// Both include a limited queue (history.ts HISTORY_LIMITS): in (1) the worker processes declare its limits and
// claim it, one of them SIGKILLed with attempts of it running; the checker proves no key and not the queue ran
// more than its concurrency and no key started more than its rate, from the database's samples and receipts
// and from the workers' handler intervals.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedPostgres } from '../../src/embedded/launcher.js';
import { resolveSchema } from '../../src/storage/operations.js';
import { chaosSleep } from '../fixtures/chaos-jobs.js';
import { createModelDatabase, type ModelDatabase } from '../model/engine.js';
import { checkHistory, workerEvents } from '../model/history-check.js';
import { HistoryRun } from '../model/history.js';
import { declaredLimits, HISTORY_LIMITS } from '../model/history-limits.js';
import {
  ChaosWorker,
  closeScene,
  openScene,
  printReport,
  waitFor,
  workerConfig,
  type Scene,
} from './harness.js';
import { verifyRun, type ExpectedJob } from './invariants.js';

const SEED = Number(process.env.AWA_MODEL_SEED ?? 20261206);
const QUEUES = ['hq', 'hq_dlq', HISTORY_LIMITS.queue];

describe('chaos: concurrent histories across processes and a server restart', () => {
  let scene: Scene | undefined;
  const workers: ChaosWorker[] = [];
  let server: EmbeddedPostgres | undefined;
  let owned: ModelDatabase | undefined;

  beforeAll(async () => {
    scene = await openScene('history');
  });
  afterAll(async () => {
    await closeScene(scene, workers);
    await owned?.drop().catch(() => {});
    await server?.destroy();
  }, 60_000);

  it(`a SIGKILLed worker process, terminated producers (seed ${SEED})`, async () => {
    const { db, client, pool, logs } = scene!;
    const spawn = (id: string) =>
      ChaosWorker.spawn(
        logs.dir,
        workerConfig(db.url, id, {
          sleepMs: 20,
          queues: {
            hq: { concurrency: 6 },
            hq_dlq: { concurrency: 6, dlq: true },
            [HISTORY_LIMITS.queue]: { concurrency: 6, limits: declaredLimits(HISTORY_LIMITS) },
          },
        }),
      );
    workers.push(...(await Promise.all(['hist-a', 'hist-b'].map(spawn))));
    await waitFor('a leader', () => workers.some((w) => w.isLeader()), 10_000);
    const run = new HistoryRun(
      db.url,
      client,
      resolveSchema(),
      {
        seed: SEED,
        produceMs: 6_000,
        producers: 3,
        claimers: 0,
        leader: false,
        kind: chaosSleep.kind,
        queues: QUEUES,
        terminateEveryMs: 500,
        pinSnapshot: false,
        stallClaimer: false,
        stalenessSeconds: 2,
        limited: HISTORY_LIMITS,
        midRun: async () => {
          const victim = workers.find((w) => w.running().length > 0) ?? workers[0]!;
          await victim.kill();
          workers.push(await spawn('hist-c'));
        },
      },
      'procs',
    );
    await run.run();
    await Promise.all(workers.map((w) => w.stop()));
    const events = [...run.events, ...workerEvents(workers, run.t0, run.events.length)];
    const report = await checkHistory(
      events,
      client,
      pool,
      run.schema,
      QUEUES,
      `procs-${SEED}`,
      HISTORY_LIMITS,
    );
    const committed = new Set(events.flatMap((e) => (e.op === 'committed' ? e.uids : [])));
    const expected: ExpectedJob[] = events.flatMap((e) =>
      e.op === 'claimed'
        ? e.jobs
            .filter((j) => j.runLease === 1 && committed.has(j.uid))
            .map((j) => ({ id: j.id, uid: j.uid, kind: chaosSleep.kind, state: 'completed' as const }))
        : [],
    );
    const verified = await verifyRun(client, expected, workers, { allowWorkerErrors: true });
    printReport('model-history-procs', verified, {
      ...run.counters,
      committed: report.committed,
      ...report.limited,
    });
    expect(report.violations, `history written to ${report.file}`).toEqual([]);
    expect(verified.violations).toEqual([]);
    expect(report.committed).toBeGreaterThan(50);
    expect(workers.filter((w) => w.killedAt !== null)).toHaveLength(1);
    expect(report.limited!.dbStarts).toBeGreaterThan(50);
  }, 180_000);

  it(`a PostgreSQL restart mid-history (seed ${SEED})`, async () => {
    server = await EmbeddedPostgres.start();
    owned = await createModelDatabase(server.url, 'restart');
    const srv = server;
    const run = new HistoryRun(
      owned.url,
      owned.client,
      owned.schema,
      {
        seed: SEED,
        produceMs: 6_000,
        producers: 3,
        claimers: 2,
        queues: QUEUES,
        terminateEveryMs: 1_000,
        pinSnapshot: true,
        stallClaimer: false,
        stalenessSeconds: 2,
        restart: () => srv.restart(),
        limited: HISTORY_LIMITS,
      },
      'restart',
    );
    await run.run();
    const report = await checkHistory(
      run.events,
      owned.client,
      owned.pool,
      owned.schema,
      QUEUES,
      `restart-${SEED}`,
      HISTORY_LIMITS,
    );
    console.log(
      `[history] restart seed ${SEED}: ${JSON.stringify({ ...report, violations: report.violations.length, ...run.counters })}`,
    );
    expect(report.violations, `history written to ${report.file}`).toEqual([]);
    expect(run.events.some((e) => e.op === 'restart')).toBe(true);
    expect(report.committed).toBeGreaterThan(50);
    expect(report.limited!.dbStarts).toBeGreaterThan(50);
  }, 180_000);
});
