import type { PoolClient } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  claimJobs,
  settleAttempts,
  listJobs,
  queueCounts,
  rotateRing,
  tallySlots,
} from '../../src/storage/operations.js';
import { settleAll } from '../helpers/claim.js';
import { readsSoFar } from '../helpers/table-stats.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// What an operator's page of jobs reads while the ring holds many settled receipts (nothing prunes here, as
// nothing does while a backlog or a long job holds the oldest slot), counted by PostgreSQL rather than timed:
// the index entries and rows the read's own transaction returned in the engine's schema. A page must not expand
// every settled receipt into its members: the running list once walked every member of every receipt in the
// ring (and timed out on a large one), and a page of completed jobs expanded every completed receipt.

const RECEIPTS = 2_000;
const PER_RECEIPT = 5;

describe('read cost beside a ring of settled receipts', () => {
  let f: StorageFixture;

  /** One read in a transaction of its own: what it returned, and the entries and rows it read. */
  const readCounted = async <T>(read: (c: PoolClient) => Promise<T>) => {
    const c = await f.pool.connect();
    try {
      await c.query('begin');
      const before = await readsSoFar(c);
      const result = await read(c);
      const reads = (await readsSoFar(c)) - before;
      await c.query('commit');
      return { result, reads };
    } finally {
      c.release();
    }
  };
  const counted = async (filter: Parameters<typeof listJobs>[2]) => {
    const { result: jobs, reads } = await readCounted((c) => listJobs(c, f.schema, filter));
    return { jobs, reads };
  };

  const claim = (max: number) =>
    claimJobs(f.pool, f.schema, {
      queue: 'held',
      max,
      instanceId: 'read-cost',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    }).then((r) => r.batches);

  beforeAll(async () => {
    f = await storageFixture('read_cost');
    await f.client.copyEnqueue(
      Array.from({ length: RECEIPTS * PER_RECEIPT + 3 }, (_, i) => ({
        kind: 'r',
        args: { i },
        options: { queue: 'held' },
      })),
    );
    // Many small receipts, all completed, then (the ring turned) three jobs left running in the new slot.
    for (let i = 0; i < RECEIPTS; i++) {
      const batches = await claim(PER_RECEIPT);
      await settleAttempts(f.pool, f.schema, settleAll(batches, 'completed'));
    }
    expect(await rotateRing(f.pool, f.schema)).not.toBeNull();
    expect((await claim(3)).flatMap((b) => b.jobs)).toHaveLength(3);
  });
  afterAll(async () => {
    await f.close();
  });

  it('the running list reads each receipt once, not each member of every receipt', async () => {
    const { jobs, reads } = await counted({ state: 'running', queue: 'held', limit: 50 });
    expect(jobs).toHaveLength(3);
    expect(jobs.every((j) => j.state === 'running')).toBe(true);
    expect(reads).toBeLessThan(3 * RECEIPTS + 500);
  });

  it('a page of completed jobs expands the newest receipts only', async () => {
    const { jobs, reads } = await counted({ state: 'completed', queue: 'held', limit: 50 });
    expect(jobs).toHaveLength(50);
    expect(new Set(jobs.map((j) => j.id)).size).toBe(50);
    // Newest first, and the newest completions there are: the jobs of the last ten receipts.
    const newest = Number(jobs[0]!.id);
    expect(jobs.map((j) => Number(j.id))).toEqual([...jobs.map((j) => Number(j.id))].sort((a, b) => b - a));
    expect(newest).toBe(RECEIPTS * PER_RECEIPT);
    // The closures and the queue's receipts once each; expanding every receipt would read 10,000 members more.
    expect(reads).toBeLessThan(2 * RECEIPTS + 500);
    // Without the queue filter too.
    const all = await counted({ state: 'completed', limit: 50 });
    expect(all.jobs.map((j) => j.id)).toEqual(jobs.map((j) => j.id));
    // Unfiltered, the receipts' closures alone are read: not a probe of each receipt's claim as well.
    expect(all.reads).toBeLessThan(RECEIPTS + 500);
  });

  it('once the leader tallies the settled slot, counts and pages read none of its receipts', async () => {
    const before = await readCounted((c) => queueCounts(c, f.schema));
    // The sealed slot's receipts are all settled; the current one holds the three running.
    expect(await tallySlots(f.pool, f.schema, 100)).toBe(1);
    const after = await readCounted((c) => queueCounts(c, f.schema));
    const held = (r: typeof after) => r.result.find((q) => q.queue === 'held');
    expect(held(after)).toEqual(held(before));
    expect(held(after)).toMatchObject({ completed: RECEIPTS * PER_RECEIPT, running: 3, available: 0 });
    // Before, every receipt and closure of the ring was read (2,000 of each); now the tally's one row.
    expect(before.reads).toBeGreaterThan(2 * RECEIPTS);
    expect(after.reads).toBeLessThan(300);
    const running = await counted({ state: 'running', queue: 'held', limit: 50 });
    expect(running.jobs).toHaveLength(3);
    expect(running.reads).toBeLessThan(300);
    // The newest completions are still in the tallied slot: it is read for the page, and gives the same page.
    const completed = await counted({ state: 'completed', queue: 'held', limit: 50 });
    expect(completed.jobs.map((j) => Number(j.id))).toEqual(
      Array.from({ length: 50 }, (_, i) => RECEIPTS * PER_RECEIPT - i),
    );
  });
});
