// Concurrent histories, fast profile: producers (one, many, COPY; a sixth rolled back), claimers and a
// maintenance leader on connections of their own, while backends are terminated, a REPEATABLE READ snapshot
// stays pinned and a claimer goes silent past the rescue window. The history checker proves: every committed
// job ends exactly once, no rolled-back job runs, no attempt is settled twice, no stale run lease is
// accepted, blocks are claimed in order, nothing is left running, and the ring empties; and for the limited
// queue among them, that no key ran more than its concurrency, the queue more than its own, and no key started
// more than its rate allows (limitsHeld). A failed check writes the history to a file (its path is in the
// failure). AWA_MODEL_SEED overrides the seed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serverUrl } from '../helpers/database.js';
import { STORAGE_VARIANTS } from './variants.js';
import { createModelDatabase, type ModelDatabase } from '../model/engine.js';
import { checkHistory } from '../model/history-check.js';
import { HistoryRun } from '../model/history.js';
import { HISTORY_LIMITS } from '../model/history-limits.js';

const SEED = Number(process.env.AWA_MODEL_SEED ?? 20261206);

describe.each(STORAGE_VARIANTS)('concurrent histories in one process ($name storage)', (variant) => {
  let db: ModelDatabase;
  beforeAll(async () => {
    db = await createModelDatabase(serverUrl(), 'hist', undefined, variant);
  });
  afterAll(async () => {
    await db?.drop();
  });

  it(`terminated backends, a pinned snapshot and a silent claimer (seed ${SEED})`, async () => {
    const queues = ['hq', 'hq_dlq', HISTORY_LIMITS.queue];
    const run = new HistoryRun(
      db.url,
      db.client,
      db.schema,
      {
        seed: SEED,
        produceMs: 8_000,
        producers: 3,
        claimers: 2,
        queues,
        terminateEveryMs: 400,
        pinSnapshot: true,
        stallClaimer: true,
        stalenessSeconds: 2,
        limited: HISTORY_LIMITS,
      },
      'fast',
      variant,
    );
    await run.run();
    const report = await checkHistory(
      run.events,
      db.client,
      db.pool,
      db.schema,
      queues,
      `seed-${SEED}`,
      HISTORY_LIMITS,
    );
    console.log(
      `[history] seed ${SEED}: ${JSON.stringify({ ...report, violations: report.violations.length, ...run.counters })}`,
    );
    expect(report.violations, `history written to ${report.file}`).toEqual([]);
    expect(report.committed).toBeGreaterThan(50);
    expect(run.counters.faults).toBeGreaterThan(5);
    // The limited queue ran, and the database recorded its starts.
    expect(report.limited!.dbStarts).toBeGreaterThan(50);
  }, 180_000);
});
