// Races over one attempt, ordered by fc.scheduler: the writers that may end an attempt start in every order the
// scheduler picks, each on a connection of its own, and exactly one of them wins; the job ends the way the
// winner says (the model's rule for that writer), and every other writer is told it lost. A running attempt:
// its settlement, an operator cancel and the rescue of its silent instance. A parked attempt: its callback,
// the callback timeout and an operator cancel.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serverUrl } from '../helpers/database.js';
import { STORAGE_VARIANTS } from './variants.js';
import { createModelDatabase, type ModelDatabase } from '../model/engine.js';

const SEED = Number(process.env.AWA_MODEL_SEED ?? 20261206);

/** The order the scheduler released the writers in, for a failure message. */
const order = (s: fc.Scheduler) => JSON.stringify(s.report().map((t) => t.label));

describe.each(STORAGE_VARIANTS)('races over one attempt ($name storage, fc.scheduler)', (variant) => {
  let db: ModelDatabase;
  let n = 0;
  beforeAll(async () => {
    db = await createModelDatabase(serverUrl(), 'race', undefined, variant);
  });
  afterAll(async () => {
    await db?.drop();
  });

  /** One job claimed by an instance that has already gone silent; parked on a callback when `park`. */
  async function attempt(park: boolean) {
    const instance = `race-${++n}`;
    const { pool, schema, client, storage, variant } = db;
    await storage.instances.registerInstance(
      pool,
      instance,
      [{ queue: 'race', dlq: false, concurrency: 1 }],
      'race',
    );
    const { id } = await client.enqueue('r', { n }, { queue: 'race', maxAttempts: 3 });
    const [b] = (
      await storage.claimer.claim(pool, {
        queue: 'race',
        max: 1,
        instanceId: instance,
        agingSeconds: 3600,
        deadlineSeconds: 0,
      })
    ).batches;
    const j = b!.jobs[0]!;
    expect(j.id).toBe(id);
    const ref = { claimSlot: b!.claimSlot, batchId: b!.batchId, idx: j.idx, jobId: id, runLease: j.runLease };
    let token: string | null = null;
    if (park) {
      token = await storage.settler.registerCallback(pool, ref, 3_600_000);
      expect([...(await storage.settler.settleAttempts(pool, [{ ...ref, outcome: 'wait' }]))]).toEqual([id]);
      await variant.hooks.expireCallbackTimeout(pool, schema, id);
    }
    await variant.hooks.setHeartbeatAge(pool, schema, [instance], 3_600);
    return { id, ref, token: token! };
  }

  it(`a settlement, an operator cancel and a rescue race for a running attempt (seed ${SEED})`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.scheduler(), async (s) => {
        const { pool, client, storage } = db;
        const { id, ref } = await attempt(false);
        const settle = s.scheduleFunction(async () =>
          (await storage.settler.settleAttempts(pool, [{ ...ref, outcome: 'completed' }])).has(id),
        );
        const cancel = s.scheduleFunction(async () => await client.cancel(id));
        const rescue = s.scheduleFunction(async () =>
          (await storage.maintenance.rescue(pool, { stalenessSeconds: 600, maxBatches: 100 })).some(
            (r) => r.jobId === id,
          ),
        );
        const results = Promise.all([settle(), cancel(), rescue()]);
        await s.waitAll();
        const [settled, cancelled, rescued] = await results;
        // The cancel ends the attempt only if it comes first; after a rescue it still cancels the retry.
        const winners = [settled, cancelled === 'running', rescued].filter(Boolean).length;
        expect(winners, order(s)).toBe(1);
        const state = (await client.getJob(id))!.state;
        expect(state, order(s)).toBe(settled ? 'completed' : cancelled ? 'cancelled' : 'retryable');
      }),
      { seed: SEED, numRuns: 25 },
    );
  }, 60_000);

  it(`a callback, its timeout and an operator cancel race for a parked attempt (seed ${SEED})`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.scheduler(), fc.constantFrom('complete', 'retry'), async (s, action) => {
        const { pool, client, storage } = db;
        const { id, token } = await attempt(true);
        const callback = s.scheduleFunction(async () =>
          action === 'complete'
            ? (await client.completeExternal(token, { ok: 1 })).outcome === 'settled'
            : (await client.retryExternal(token, {})).outcome === 'settled',
        );
        const timeout = s.scheduleFunction(async () =>
          (await storage.maintenance.expireCallbacks(pool, 100)).some((e) => e.jobId === id),
        );
        const cancel = s.scheduleFunction(async () => await client.cancel(id));
        const results = Promise.all([callback(), timeout(), cancel()]);
        await s.waitAll();
        const [called, timedOut, cancelled] = await results;
        expect([called, timedOut, cancelled === 'waiting_external'].filter(Boolean).length, order(s)).toBe(1);
        // A cancel that comes after a retry (by the callback or the timeout) cancels the retry.
        const state = (await client.getJob(id))!.state;
        const want = called && action === 'complete' ? 'completed' : cancelled ? 'cancelled' : 'retryable';
        expect(state, order(s)).toBe(want);
      }),
      { seed: SEED, numRuns: 25 },
    );
  }, 60_000);
});
