import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  cleanupHistory,
  settleAttempts,
  pruneRing,
  rotateRing,
  type ClaimBatch,
  type PruneOptions,
} from '../../src/storage/operations.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';
import { claimBatches } from '../helpers/claim.js';

// Prune and cleanup decisions, driven step by step (no timers): what holds the oldest slot and what does
// not, carrying stragglers forward, a slot busy with a reader, and retention of DLQ entries, runtime rows and
// compact history. Each test starts from an empty ring in a schema of its own.

describe('ring and cleanup decisions', () => {
  let f: StorageFixture;
  const NO_CARRY: PruneOptions = { lockTimeoutMs: 20, carryLimit: 0, carryAfterSlots: 16 };
  const CARRY: PruneOptions = { lockTimeoutMs: 20, carryLimit: 1_000, carryAfterSlots: 2 };
  const claim = (queue: string, max = 100) =>
    claimBatches(f.storage, f.pool, {
      queue,
      max,
      instanceId: 'ring-test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
  const complete = (batches: ClaimBatch[], slot?: number) =>
    settleAttempts(
      f.pool,
      f.schema,
      batches.flatMap((b) =>
        b.jobs.map((j) => ({
          claimSlot: slot ?? b.claimSlot,
          batchId: b.batchId,
          idx: j.idx,
          jobId: j.id,
          runLease: j.runLease,
          outcome: 'completed' as const,
        })),
      ),
    );
  const enqueue = async (queue: string, n: number) =>
    (
      await f.client.enqueueMany(
        Array.from({ length: n }, (_, i) => ({ kind: 'k', args: { i }, options: { queue } })),
      )
    ).map((r) => r.id);
  /** Seals the current slot: a rotation (the current slot has rows, the next is empty). */
  const seal = async () => expect(await rotateRing(f.pool, f.schema)).not.toBeNull();
  const readyRows = async (id: string) =>
    (await f.pool.query(`select slot from awa.ready_entries where job_id = $1 order by slot`, [id])).rows.map(
      (r) => r.slot as number,
    );

  beforeAll(async () => {
    f = await storageFixture('ring_decisions');
  });
  afterAll(async () => {
    await f.close();
  });

  it('a receipt that lists its members (a cancelled row inside its range) keeps each completion in history, flush by flush', async () => {
    const jobs = await enqueue('rd_listed', 5);
    expect(await f.client.cancel(jobs[2]!)).not.toBeNull();
    const [batch] = await claim('rd_listed');
    expect(batch!.jobs.map((j) => j.id)).toEqual([jobs[0], jobs[1], jobs[3], jobs[4]]);
    const listed = await f.pool.query(`select lane_seqs from awa.claim_batches where batch_id = $1`, [
      batch!.batchId,
    ]);
    expect(listed.rows[0].lane_seqs).not.toBeNull();
    // Two flushes: two closures of one receipt, each its own history row.
    await complete([{ ...batch!, jobs: batch!.jobs.slice(0, 2) }]);
    await complete([{ ...batch!, jobs: batch!.jobs.slice(2) }]);
    await seal();
    expect(await pruneRing(f.pool, f.schema, NO_CARRY)).toMatchObject({ outcome: 'pruned' });
    for (const id of [jobs[0], jobs[1], jobs[3], jobs[4]]) {
      expect(await readyRows(id!)).toEqual([]);
      expect(await f.client.getJob(id!)).toMatchObject({ state: 'completed', attempt: 1 });
    }
    expect(await f.client.getJob(jobs[2]!)).toMatchObject({ state: 'cancelled' });
  });

  it('completed history does not hold a slot: it is pruned at once and the jobs stay readable as completed', async () => {
    const jobs = await enqueue('rd_done', 3);
    await complete(await claim('rd_done'));
    await seal();
    expect(await pruneRing(f.pool, f.schema, NO_CARRY)).toMatchObject({ outcome: 'pruned' });
    for (const id of jobs) {
      expect(await readyRows(id)).toEqual([]);
      expect(await f.client.getJob(id)).toMatchObject({ state: 'completed', attempt: 1, kind: null });
    }
    // Compact history past its retention is deleted; then the jobs are gone.
    const cleaned = await cleanupHistory(f.pool, f.schema, {
      failedRetentionSeconds: 3600,
      dlqRetentionSeconds: 3600,
      completedRetentionSeconds: 0,
      limit: 1000,
    });
    expect(cleaned.completed).toBeGreaterThanOrEqual(1);
    for (const id of jobs) expect(await f.client.getJob(id)).toBeNull();
  });

  it('an unclaimed row and an open receipt hold the oldest slot; carried forward, it is truncated and nothing is lost', async () => {
    const [straggler] = await enqueue('rd_unserved', 1);
    const [longRunning] = await enqueue('rd_long', 1);
    const held = await claim('rd_long'); // an attempt that stays open
    await seal();
    const oldest = (await readyRows(straggler!))[0]!;
    expect(await pruneRing(f.pool, f.schema, NO_CARRY)).toMatchObject({
      slot: oldest,
      outcome: 'unclaimed_ready_rows',
    });
    const status = await f.client.ringStatus();
    expect(status.find((s) => s.slot === oldest)).toMatchObject({ pinnedBy: 'unclaimed_ready_rows' });
    expect(status.find((s) => s.slot === oldest)?.queues?.sort()).toEqual(['rd_long', 'rd_unserved']);

    const carried = await pruneRing(f.pool, f.schema, CARRY);
    expect(carried).toMatchObject({ slot: oldest, outcome: 'carried' });
    expect(carried.carried).toBe(2); // the straggler's row and the open receipt's row
    const current = (await f.pool.query(`select awa.current_slot() as s`)).rows[0].s as number;
    expect(await readyRows(straggler!)).toEqual([current]);
    expect(await readyRows(longRunning!)).toEqual([current]);
    expect(await f.client.getJob(straggler!)).toMatchObject({ state: 'available' });
    expect(await f.client.getJob(longRunning!)).toMatchObject({ state: 'running' });
    // The open attempt settles through the slot it was claimed in (its receipt moved; a forward finds it).
    expect((await complete(held, held[0]!.claimSlot)).has(longRunning!)).toBe(true);
    expect(await f.client.getJob(longRunning!)).toMatchObject({ state: 'completed' });
    // And the straggler is still claimable, once.
    const last = await claim('rd_unserved');
    expect(last.flatMap((b) => b.jobs.map((j) => j.id))).toEqual([straggler]);
    expect(await claim('rd_unserved')).toEqual([]);
    expect((await complete(last)).has(straggler!)).toBe(true);
  });

  it('a row that commits late into an open gap holds its sealed slot, is carried forward and is claimed once', async () => {
    expect((await pruneRing(f.pool, f.schema, CARRY)).outcome).toBe('idle'); // nothing sealed from earlier tests
    const late = new pg.Client({ connectionString: f.url });
    await late.connect();
    let lateId: string;
    try {
      await late.query('begin');
      lateId = (await f.client.enqueue('k', { n: 'late' }, { client: late, queue: 'rd_gap' })).id; // position 1
      const [onTime] = await enqueue('rd_gap', 1); // position 2, committed first
      const first = await claim('rd_gap');
      expect(first.flatMap((b) => b.jobs.map((j) => j.id))).toEqual([onTime]); // position 1 becomes a gap
      expect((await complete(first)).has(onTime!)).toBe(true);
      await late.query('commit'); // below the high-water now: only the open gap leads to it
    } finally {
      await late.end();
    }
    const [slot] = await readyRows(lateId);
    await seal();
    expect(await pruneRing(f.pool, f.schema, NO_CARRY)).toMatchObject({
      slot,
      outcome: 'unclaimed_ready_rows',
    });
    expect(await pruneRing(f.pool, f.schema, CARRY)).toMatchObject({ slot, outcome: 'carried', carried: 1 });
    const current = (await f.pool.query(`select awa.current_slot() as s`)).rows[0].s as number;
    expect(await readyRows(lateId)).toEqual([current]);
    const last = await claim('rd_gap');
    expect(last.flatMap((b) => b.jobs.map((j) => j.id))).toEqual([lateId]);
    expect(await claim('rd_gap')).toEqual([]);
    expect((await complete(last)).has(lateId)).toBe(true);
  });

  it('a slot with a reader is not waited for: prune reports lock_busy and succeeds once the reader is gone', async () => {
    const jobs = await enqueue('rd_busy', 2);
    await complete(await claim('rd_busy'));
    await seal();
    const slot = (
      await f.pool.query(`select slot from awa.claim_batches where lane_id in
      (select lane_id from awa.lanes where queue = 'rd_busy') limit 1`)
    ).rows[0].slot as number;
    const reader = new pg.Client({ connectionString: f.url });
    await reader.connect();
    try {
      await reader.query('begin');
      await reader.query(`select count(*) from awa.ready_entries_${slot}`);
      const started = Date.now();
      expect(await pruneRing(f.pool, f.schema, NO_CARRY)).toMatchObject({ slot, outcome: 'lock_busy' });
      expect(Date.now() - started).toBeLessThan(2_000);
      await reader.query('commit');
    } finally {
      await reader.end();
    }
    expect(await pruneRing(f.pool, f.schema, NO_CARRY)).toMatchObject({ slot, outcome: 'pruned' });
    for (const id of jobs) expect((await f.client.getJob(id))?.state).toBe('completed');
  });

  it('cleanup deletes DLQ entries past retention, runtime rows gone a day (without receipts), and purgeDlq by queue and age', async () => {
    const insertDlq = (id: number, queue: string, ageSecs: number) =>
      f.pool.query(
        `insert into awa.dlq_entries (job_id, run_lease, kind, queue, priority, args, attempt, max_attempts, enqueued_at, dlq_at, reason)
         values ($1, 1, 'k', $2, 2, '{}', 1, 1, now(), now() - make_interval(secs => $3), 'x')`,
        [id, queue, ageSecs],
      );
    await insertDlq(900001, 'rd_dlq_a', 7200);
    await insertDlq(900002, 'rd_dlq_a', 10);
    await insertDlq(900003, 'rd_dlq_b', 7200);
    expect(await f.client.purgeDlq({ queue: 'rd_dlq_a', before: new Date(Date.now() - 3_600_000) })).toBe(1);
    expect((await f.client.listDlq({ limit: 10 })).map((e) => e.id).sort()).toEqual(['900002', '900003']);
    const cleaned = await cleanupHistory(f.pool, f.schema, {
      failedRetentionSeconds: 3600,
      dlqRetentionSeconds: 3600,
      completedRetentionSeconds: 3600,
      limit: 1000,
    });
    expect(cleaned.dlq).toBe(1);
    expect((await f.client.listDlq({ limit: 10 })).map((e) => e.id)).toEqual(['900002']);

    await f.pool.query(
      `insert into awa.runtime_instances (instance_id, hostname, pid, queues, heartbeat_at)
       values ('gone', 'h', 1, '{}', now() - interval '2 days'), ('recent', 'h', 2, '{}', now())`,
    );
    const again = await cleanupHistory(f.pool, f.schema, {
      failedRetentionSeconds: 3600,
      dlqRetentionSeconds: 3600,
      completedRetentionSeconds: 3600,
      limit: 1000,
    });
    expect(again.instances).toBe(1);
    const { rows } = await f.pool.query(
      `select instance_id from awa.runtime_instances where instance_id in ('gone', 'recent')`,
    );
    expect(rows.map((r) => r.instance_id)).toEqual(['recent']);
  });
  // Last: it leaves a queue's rows unclaimed in the ring.
  it('rotation by size or age: a small young slot stays current; enough rows, or enough age, turns it', async () => {
    await f.client.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ kind: 'k', args: { i }, options: { queue: 'turn' } })),
    );
    const generation = async () =>
      Number((await f.pool.query(`select max(generation) as g from awa.ring_rotations`)).rows[0].g);
    const before = await generation();
    // Three rows, a minute to go: not yet.
    expect(await rotateRing(f.pool, f.schema, { minRows: 4, maxAgeMs: 60_000 })).toBeNull();
    expect(await generation()).toBe(before);
    // A fourth row fills it.
    await f.client.enqueue('k', { i: 3 }, { queue: 'turn' });
    expect(await rotateRing(f.pool, f.schema, { minRows: 4, maxAgeMs: 60_000 })).not.toBeNull();
    expect(await generation()).toBe(before + 1);
    // One row in the new slot, far below the size: it turns once it is older than the age limit.
    await f.client.enqueue('k', { i: 4 }, { queue: 'turn' });
    expect(await rotateRing(f.pool, f.schema, { minRows: 1_000, maxAgeMs: 60_000 })).toBeNull();
    await new Promise((r) => setTimeout(r, 60));
    expect(await rotateRing(f.pool, f.schema, { minRows: 1_000, maxAgeMs: 50 })).not.toBeNull();
    expect(await generation()).toBe(before + 2);
  });
});
