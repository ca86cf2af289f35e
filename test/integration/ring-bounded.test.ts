import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settleAttempts, pruneRing, rotateRing, type PruneOptions } from '../../src/storage/operations.js';
import { claimBatches, settle } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Storage stays bounded when a few jobs linger (issue 8, item 7). One job sits in a queue nobody serves while
// a busy queue drains through three full turns of the ring. Without carry-forward the straggler's slot can
// never be truncated, rotation stops once the ring is full, and the current slot grows without bound; with
// it, the straggler moves forward, the ring keeps turning, and the hot tables hold a bounded number of rows.
// The leader's steps are driven by hand (the worker defaults for carrying), so the test is deterministic.

const SLOTS = 16;
const PER_SLOT = 1_000;
const TURNS = 3;
const DEFAULTS: PruneOptions = { lockTimeoutMs: 10, carryLimit: 20_000, carryAfterSlots: 8 };

describe('a straggler and a long drain', () => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('ring_bounded');
  });
  afterAll(async () => {
    await f.close();
  });

  const count = async (table: string) =>
    Number((await f.pool.query(`select count(*) as n from awa.${table}`)).rows[0].n);

  it(`one unserved job and ${TURNS} full turns of the ring: rotation never stops, the hot tables stay bounded, the straggler survives`, async () => {
    const { id: straggler } = await f.client.enqueue('rb_straggler', {}, { queue: 'rb_unserved' });
    const outcomes: string[] = [];
    let pinnedSeen = false;
    let maxReady = 0;
    let maxReceipts = 0;
    const busyIds: string[] = [];
    for (let step = 1; step <= TURNS * SLOTS; step++) {
      const ids = (
        await f.client.copyEnqueue(
          Array.from({ length: PER_SLOT }, (_, n) => ({
            kind: 'rb_job',
            args: { step, n },
            options: { queue: 'rb_busy' },
          })),
        )
      ).inserted;
      expect(ids).toBe(PER_SLOT);
      const batches = await claimBatches(f.storage, f.pool, {
        queue: 'rb_busy',
        max: PER_SLOT,
        instanceId: 'rb',
        agingSeconds: 3600,
        deadlineSeconds: 0,
      });
      const claimed = batches.flatMap((b) => b.jobs.map((j) => ({ b, j })));
      expect(claimed).toHaveLength(PER_SLOT);
      if (step === 1) busyIds.push(claimed[0]!.j.id);
      const accepted = await settleAttempts(
        f.pool,
        f.schema,
        claimed.map(({ b, j }) => settle(b, j, 'completed')),
      );
      expect(accepted.size).toBe(PER_SLOT);
      // The leader's ring step: rotate, then prune the oldest sealed slot.
      expect(await rotateRing(f.pool, f.schema), `rotation at step ${step}`).not.toBeNull();
      const status = await f.client.ringStatus();
      const oldest = status.find((s) => s.role === 'sealed');
      if (oldest?.pinnedBy === 'unclaimed_ready_rows') {
        // While the straggler holds the oldest slot, the status says so, and names its queue.
        expect(oldest.queues).toEqual(['rb_unserved']);
        pinnedSeen = true;
      }
      outcomes.push((await pruneRing(f.pool, f.schema, DEFAULTS)).outcome);
      maxReady = Math.max(maxReady, await count('ready_entries'));
      maxReceipts = Math.max(maxReceipts, await count('claim_batches'));
    }
    expect(pinnedSeen).toBe(true);
    // The straggler was carried forward, once per turn or so, and everything else was truncated.
    expect(outcomes.filter((o) => o === 'carried').length).toBeGreaterThanOrEqual(TURNS - 1);
    expect(outcomes.filter((o) => o === 'pruned').length).toBeGreaterThanOrEqual(
      TURNS * SLOTS - 3 * TURNS - 8,
    );
    // Bounded: never more than the slots the carry threshold lets fill, whatever was drained.
    expect(maxReady).toBeLessThanOrEqual(PER_SLOT * DEFAULTS.carryAfterSlots + 1);
    expect(maxReceipts).toBeLessThanOrEqual(50 * (DEFAULTS.carryAfterSlots + 1));
    // The straggler is intact and runs once; a drained job of the first turn still reads as completed.
    expect(await f.client.getJob(straggler)).toMatchObject({ state: 'available', kind: 'rb_straggler' });
    const last = await claimBatches(f.storage, f.pool, {
      queue: 'rb_unserved',
      max: 10,
      instanceId: 'rb',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
    expect(last.flatMap((b) => b.jobs.map((j) => j.id))).toEqual([straggler]);
    expect(await f.client.getJob(busyIds[0]!)).toMatchObject({ state: 'completed' });
  }, 60_000);
});
