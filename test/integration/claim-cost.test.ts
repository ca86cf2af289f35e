import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimJobs, settleAttempts } from '../../src/storage/operations.js';
import { settleAll } from '../helpers/claim.js';
import { readsSoFar } from '../helpers/table-stats.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// What a claim reads, counted by PostgreSQL rather than timed: the index entries and table rows the claim's own
// transaction read in the engine's schema (pg_stat_get_xact_tuples_returned/_fetched over its tables and
// indexes, read before it commits). A claim must read about what it takes, whether its rows committed before
// or after the lane's high-water passed them, and must not walk the entries of a block still in flight. The
// engine once read every row that had committed late into a lane's open gaps on every claim (a 20,000-row
// block: 20,000 rows per claim), and walked the entries of a COPY still streaming on every claim.

const BLOCK = 20_000;
const MAX = 500;

describe('claim cost', () => {
  let f: StorageFixture;
  const req = (queue: string, max: number) => ({
    queue,
    max,
    instanceId: 'cost',
    agingSeconds: 3600,
    deadlineSeconds: 0,
  });
  const jobs = (queue: string, n: number, from = 0) =>
    Array.from({ length: n }, (_, i) => ({ kind: 'c', args: { i: from + i }, options: { queue } }));

  /** One claim in a transaction of its own: the jobs it took, and the entries and rows it read. */
  const claimCounted = async (queue: string, max: number) => {
    const c = await f.pool.connect();
    try {
      await c.query('begin');
      const before = await readsSoFar(c);
      const { batches } = await claimJobs(c, f.schema, req(queue, max));
      const reads = (await readsSoFar(c)) - before;
      await c.query('commit');
      if (batches.length > 0) await settleAttempts(f.pool, f.schema, settleAll(batches, 'completed'));
      return { ids: batches.flatMap((b) => b.jobs.map((j) => j.id)), reads };
    } finally {
      c.release();
    }
  };

  /** Claims until the queue has nothing left: every job once, and what each claim read. */
  const drain = async (queue: string) => {
    const taken: string[] = [];
    const claims: { n: number; reads: number }[] = [];
    for (;;) {
      const { ids, reads } = await claimCounted(queue, MAX);
      if (ids.length === 0) return { taken, claims };
      taken.push(...ids);
      claims.push({ n: ids.length, reads });
    }
  };

  const producer = async () => {
    const c = new pg.Client({ connectionString: f.url });
    await c.connect();
    return c;
  };

  beforeAll(async () => {
    f = await storageFixture('claim_cost');
  });
  afterAll(async () => {
    await f.close();
  });

  it('a block that commits after later rows were claimed costs each claim what a fresh block does', async () => {
    await f.client.copyEnqueue(jobs('fresh', BLOCK));
    const fresh = await drain('fresh');
    expect(fresh.taken).toHaveLength(BLOCK);

    // The late block takes its positions first; a later load commits and is claimed past it (the block
    // becomes an open gap); then the block commits.
    const a = await producer();
    try {
      await a.query('begin');
      await f.client.copyEnqueue(jobs('late', BLOCK), { client: a });
      await f.client.copyEnqueue(jobs('late', 10, BLOCK));
      const early = await claimCounted('late', MAX);
      expect(early.ids).toHaveLength(10);
      await a.query('commit');
    } finally {
      await a.end();
    }
    const late = await drain('late');
    expect(late.taken).toHaveLength(BLOCK);
    expect(new Set(late.taken).size).toBe(BLOCK);

    const perJob = (d: typeof fresh) => d.claims.reduce((s, c) => s + c.reads, 0) / BLOCK;
    // Claims read about what they take: a few entries and rows per job, never the rest of the block.
    for (const c of late.claims) expect(c.reads).toBeLessThan(4 * c.n + 400);
    expect(perJob(late)).toBeLessThan(1.5 * perJob(fresh));
  });

  it('settled rows the ring still holds cost nothing: a claim across priorities reads what it takes', async () => {
    // Two priorities with work make the claim read each lane's next row (priority aging). Nothing prunes here,
    // as nothing does while a snapshot or a backlog holds the ring: the lanes' claimed rows stay.
    const mixed = Array.from({ length: BLOCK }, (_, i) => ({
      kind: 'c',
      args: { i },
      options: { queue: 'aged', priority: ((i % 2) + 1) as 1 | 2 },
    }));
    await f.client.copyEnqueue(mixed);
    let taken = 0;
    while (taken < BLOCK / 2) taken += (await claimCounted('aged', MAX)).ids.length;
    // 5,000 claimed rows in each lane behind its high-water: small claims read a few rows each, not those.
    for (let i = 0; i < 10; i++) {
      const { ids, reads } = await claimCounted('aged', 4);
      expect(ids).toHaveLength(4);
      expect(reads).toBeLessThan(4 * 4 + 400);
    }
  });

  it('a block still in flight is skipped, not walked: claims beside it read a bounded number of entries', async () => {
    const a = await producer();
    try {
      await a.query('begin');
      await f.client.copyEnqueue(jobs('beside', BLOCK), { client: a });
      // Nothing to take while it streams: each claim reads a few hundred entries at most, not the block.
      for (let i = 0; i < 4; i++) {
        const { ids, reads } = await claimCounted('beside', MAX);
        expect(ids).toEqual([]);
        expect(reads).toBeLessThan(400);
      }
      // A later load that commits while the block is still in flight is claimed past it, reading what it
      // takes.
      await f.client.copyEnqueue(jobs('beside', 300, BLOCK));
      const past = await claimCounted('beside', MAX);
      expect(past.ids).toHaveLength(300);
      expect(past.reads).toBeLessThan(4 * 300 + 400);
      const again = await claimCounted('beside', MAX);
      expect(again.ids).toEqual([]);
      expect(again.reads).toBeLessThan(400);
      await a.query('commit');
    } finally {
      await a.end();
    }
    const rest = await drain('beside');
    expect(rest.taken).toHaveLength(BLOCK);
    for (const c of rest.claims) expect(c.reads).toBeLessThan(4 * c.n + 400);
  });
});
