import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decide } from '../../src/host/outcome.js';
import { claimBatches } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { STORAGE_VARIANTS } from './variants.js';

// One backoff rule (issue 8, item 11): 2^attempt seconds plus up to 25 % jitter, capped at 24 h AFTER the
// jitter, defined once in SQL (backoff() in sql/functions/core/common.sql) and applied by settle_attempts() to every retry
// that did not ask for a delay of its own; the TypeScript side hands such retries over without a run time.

const DAY_S = 86_400;

describe.each(STORAGE_VARIANTS)('the backoff rule ($name storage)', (variant) => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('backoff', variant);
  });
  afterAll(async () => {
    await f.close();
  });

  it('stays within [2^attempt, 1.25 × 2^attempt] seconds and never exceeds 24 h, jitter included', async () => {
    // 400 draws per attempt: the chance that none lands in the top tenth of the jitter is 0.9^400.
    const { rows } = await f.pool.query<{ attempt: number; lo: number; hi: number }>(
      `select a as attempt, min(extract(epoch from awa.backoff(a)))::float8 as lo,
              max(extract(epoch from awa.backoff(a)))::float8 as hi
         from generate_series(0, 40) a, generate_series(1, 400) n
        group by a order by a`,
    );
    expect(rows).toHaveLength(41);
    for (const { attempt, lo, hi } of rows) {
      const base = 2 ** Math.min(attempt, 30);
      expect(lo, `attempt ${attempt}`).toBeGreaterThanOrEqual(Math.min(base, DAY_S));
      expect(hi, `attempt ${attempt}`).toBeLessThanOrEqual(Math.min(base * 1.25, DAY_S));
      // The jitter is really there below the cap, and the cap is reached above it.
      if (base * 1.25 <= DAY_S) expect(hi - lo, `attempt ${attempt}`).toBeGreaterThan(base * 0.1);
    }
    // At the cap: 2^16 s plus jitter can reach 81,920 s, still under it; from 2^17 s on, exactly 24 h.
    expect(rows[16]!.hi).toBeLessThan(DAY_S);
    for (const r of rows.slice(17)) expect([r.attempt, r.lo, r.hi]).toEqual([r.attempt, DAY_S, DAY_S]);
    // An absurd attempt number is the cap too, not an overflow.
    const huge = await f.pool.query(`select extract(epoch from awa.backoff(32767))::float8 as s`);
    expect(huge.rows[0].s).toBe(DAY_S);
  });

  it('is what a retry without a delay of its own gets: the runtime leaves the run time to settle_attempts()', async () => {
    // The runtime's decision for a plain error carries no run time...
    const decided = decide(new Error('boom'), true, 1, 25);
    expect(decided).toMatchObject({ outcome: 'retry' });
    expect((decided as { runAt?: Date }).runAt).toBeUndefined();
    // ...and settle_attempts() gives the retry of attempt 1 a run time 2 to 2.5 s out.
    await f.client.enqueue('bk_job', {}, { queue: 'bk' });
    const [batch] = await claimBatches(f.storage, f.pool, {
      queue: 'bk',
      max: 1,
      instanceId: 'bk',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
    const job = batch!.jobs[0]!;
    const accepted = await f.storage.settler.settleAttempts(f.pool, [
      {
        claimSlot: batch!.claimSlot,
        batchId: batch!.batchId,
        idx: job.idx,
        jobId: job.id,
        runLease: job.runLease,
        outcome: 'retry',
        error: { attempt: 1, error: 'boom' },
      },
    ]);
    expect(accepted.has(job.id)).toBe(true);
    const { rows } = await f.pool.query<{ delay: number }>(
      `select extract(epoch from run_at - (select max(closed_at) from awa.closure_batches))::float8 as delay
         from awa.deferred_jobs where job_id = $1`,
      [job.id],
    );
    expect(rows[0]!.delay).toBeGreaterThanOrEqual(2);
    expect(rows[0]!.delay).toBeLessThanOrEqual(2.5);
  });
});
