import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ringStatus, rotateRing } from '../../src/storage/operations.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// What the storage page and `awa storage` say about the slot prune cannot truncate: how many unclaimed rows
// hold it (counted up to 100,000, and saying so past that) and which queues they belong to (every one, found
// per lane, not from a capped sample of rows, which named only the queue whose rows came first).

describe('ring status', () => {
  let f: StorageFixture;

  beforeAll(async () => {
    f = await storageFixture('ring_status');
  });
  afterAll(async () => {
    await f.close();
  });

  it('bounds the unclaimed count it reports and names every queue that holds the oldest slot', async () => {
    await f.client.copyEnqueue(
      Array.from({ length: 10_010 }, (_, i) => ({ kind: 'big', args: { i }, options: { queue: 'st_big' } })),
    );
    await f.client.enqueue('small', { n: 1 }, { queue: 'st_small' });
    const held = await rotateRing(f.pool, f.schema);
    expect(held).not.toBeNull();

    const slots = await ringStatus(f.pool, f.schema);
    const oldest = slots.find((s) => s.role === 'sealed' && s.pinnedBy !== null);
    expect(oldest).toMatchObject({
      pinnedBy: 'unclaimed_ready_rows',
      unclaimed: 10_000,
      unclaimedMore: true,
      openReceipts: 0,
      queues: ['st_big', 'st_small'],
    });
    expect(slots.at(-1)).toMatchObject({ role: 'current', unclaimed: null, unclaimedMore: null });
  });

  it('counts exactly below the bound', async () => {
    const g = await storageFixture('ring_status_small');
    try {
      await g.client.enqueueMany(
        Array.from({ length: 7 }, (_, i) => ({ kind: 'k', args: { i }, options: { queue: 'st_few' } })),
      );
      await rotateRing(g.pool, g.schema);
      const oldest = (await ringStatus(g.pool, g.schema)).find((s) => s.pinnedBy !== null);
      expect(oldest).toMatchObject({ unclaimed: 7, unclaimedMore: false, queues: ['st_few'] });
    } finally {
      await g.close();
    }
  });
});
