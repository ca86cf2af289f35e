import type pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { jobOutcome, settleAttempts } from '../../src/storage/operations.js';
import { claimBatches, settle } from '../helpers/claim.js';
import { duringPrune } from './during-prune.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// TRUNCATE is not MVCC-safe, and a statement inside a stable function runs on its caller's snapshot, taken before
// that statement locked the ring partitions it reads. So a read that waits for prune's ACCESS EXCLUSIVE lock on the
// slot it truncates, in a stable function, then finds that slot empty, and misses what the prune wrote (the
// receipts and rows it carried forward, the compact history it kept): all newer than its snapshot. Each test here
// holds a prune open on one connection, starts the operation on another, lets the prune commit once the operation
// waits for its locks, and checks what the operation decided. A database per test: each seals and prunes the
// ring's first slot, and a wrong decision can leave the ring in a state the next prune refuses (a row claimed
// twice is carried twice).

describe('decisions that read the ring while prune truncates a slot', () => {
  let f: StorageFixture;
  beforeEach(async () => {
    f = await storageFixture('prune_snapshot');
  });
  afterEach(async () => {
    await f.close();
  });

  const claim = (queue: string, max: number, db: pg.ClientBase | pg.Pool = f.pool) =>
    claimBatches(f.storage, db, {
      queue,
      max,
      instanceId: 'snapshot-test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
  const jobsOf = (batches: { jobs: { id: string }[] }[]) => batches.flatMap((b) => b.jobs.map((j) => j.id));

  /** Enqueues jobs through enqueue() (meta per job, null for none); returns each job's id and whether it was
   * inserted. */
  const enqueue = async (queue: string, metas: (object | null)[], db: pg.ClientBase | pg.Pool = f.pool) => {
    const { rows } = await db.query<{ job_id: string; inserted: boolean }>(
      `select job_id::text, inserted
         from awa.enqueue($1::text[], $2::text[], $3::smallint[], $4::jsonb[], $5::smallint[], $6::timestamptz[],
                          $7::jsonb[])`,
      [
        metas.map(() => 'snap'),
        metas.map(() => queue),
        metas.map(() => 2),
        metas.map((_, i) => JSON.stringify({ i })),
        metas.map(() => 5),
        metas.map(() => null),
        metas.map((m) => (m === null ? null : JSON.stringify(m))),
      ],
    );
    return rows;
  };

  it('a claim whose lane heal waits for a prune carrying an open receipt does not claim that receipt again', async () => {
    const [a, b] = await enqueue('snap_claim', [null, null]);
    expect(jobsOf(await claim('snap_claim', 1))).toEqual([a!.job_id]);
    // The receipt of job a is the lane's newest, above the claimed high-water the lane has cached: the next
    // claim's heal must find it (carried into the current slot), or it takes a's row (carried too) again.
    const second = await duringPrune(f, 'carried', (c) => claim('snap_claim', 5, c));
    expect(jobsOf(second)).toEqual([b!.job_id]);
    // One receipt with members per job: a's (where the prune carried it) and b's.
    const { rows } = await f.pool.query<{ n: number }>(
      `select count(*)::int as n from awa.claim_batches where lane_id = (
         select lane_id from awa.lanes where queue = 'snap_claim' and priority = 2 and shard = 0 and not bulk)
         and size > 0`,
    );
    expect(rows[0]!.n).toBe(2);
  });

  it('a unique key whose holder runs in a slot being carried is not taken over by a duplicate', async () => {
    const unique = { unique: { key: 'snap:one', states: ['available', 'running'] } };
    const [held] = await enqueue('snap_unique', [unique]);
    expect(held!.inserted).toBe(true);
    expect(jobsOf(await claim('snap_unique', 1))).toEqual([held!.job_id]);
    const dup = await duringPrune(f, 'carried', (c) => enqueue('snap_unique', [unique], c));
    expect(dup).toEqual([{ job_id: held!.job_id, inserted: false }]);
    const { rows } = await f.pool.query(`select job_id::text from awa.unique_claims where key = 'snap:one'`);
    expect(rows).toEqual([{ job_id: held!.job_id }]);
  });

  it('a unique key whose completed holder a prune moves to compact history is not taken over', async () => {
    const unique = { unique: { key: 'snap:done', states: ['available', 'running', 'completed'] } };
    const [held] = await enqueue('snap_unique_done', [unique]);
    const batches = await claim('snap_unique_done', 1);
    expect([
      ...(await settleAttempts(f.pool, f.schema, [settle(batches[0]!, batches[0]!.jobs[0]!, 'completed')])),
    ]).toEqual([held!.job_id]);
    const dup = await duringPrune(f, 'pruned', (c) => enqueue('snap_unique_done', [unique], c));
    expect(dup).toEqual([{ job_id: held!.job_id, inserted: false }]);
  });

  it('a result wait that begins while its running job is carried finds the job and keeps its row', async () => {
    const [job] = await enqueue('snap_wait', [null]);
    expect(jobsOf(await claim('snap_wait', 1))).toEqual([job!.job_id]);
    const begun = await duringPrune(f, 'carried', async (c) => {
      const { rows } = await c.query(`select * from awa.result_wait_begin($1::bigint, 'snap-waiter')`, [
        job!.job_id,
      ]);
      return rows;
    });
    expect(begun).toEqual([{ state: 'running', result: null, last_error: null }]);
    const { rows } = await f.pool.query(`select waiter from awa.result_waiters where job_id = $1::bigint`, [
      job!.job_id,
    ]);
    expect(rows).toEqual([{ waiter: 'snap-waiter' }]);
  });

  it("a completed job's outcome read while a prune moves it to compact history is its completion", async () => {
    const [job] = await enqueue('snap_outcome', [null]);
    const batches = await claim('snap_outcome', 1);
    expect([
      ...(await settleAttempts(f.pool, f.schema, [settle(batches[0]!, batches[0]!.jobs[0]!, 'completed')])),
    ]).toEqual([job!.job_id]);
    const outcome = await duringPrune(f, 'pruned', (c) => jobOutcome(c, f.schema, job!.job_id));
    expect(outcome).toEqual({ state: 'completed', result: null, lastError: null });
  });

  it('the steps of a job running in a slot being carried are not pruned as those of a gone job', async () => {
    const [job] = await enqueue('snap_steps', [null]);
    const [batch] = await claim('snap_steps', 1);
    const member = batch!.jobs[0]!;
    const { rows: recorded } = await f.pool.query(
      `select status from awa.record_step($1, $2, $3, $4, $5, 'fetch', '{"n": 1}', 100)`,
      [batch!.claimSlot, batch!.batchId, member.idx, member.id, member.runLease],
    );
    expect(recorded).toEqual([{ status: 'recorded' }]);
    const pruned = await duringPrune(f, 'carried', async (c) => {
      const { rows } = await c.query(`select deleted::int from awa.prune_steps($1::bigint - 1, 100, 0)`, [
        job!.job_id,
      ]);
      return rows;
    });
    expect(pruned).toEqual([{ deleted: 0 }]);
    const { rows } = await f.pool.query(`select name from awa.job_steps where job_id = $1::bigint`, [
      job!.job_id,
    ]);
    expect(rows).toEqual([{ name: 'fetch' }]);
  });

  it('a flow whose job runs in a slot being carried is not pruned as a flow whose jobs are all gone', async () => {
    const { rows: made } = await f.pool.query<{ flow_id: string; job_id: string }>(
      `select flow_id::text, job_id::text
         from awa.enqueue_flow('snap', array['only'], array['snap'], array['snap_flow'], array[2::smallint],
                               array['{}'::jsonb], array[5::smallint], array[null::timestamptz], array[null::jsonb],
                               null, null, null, null)`,
    );
    const [{ flow_id: flowId, job_id: jobId }] = made as [{ flow_id: string; job_id: string }];
    expect(jobsOf(await claim('snap_flow', 1))).toEqual([jobId]);
    const pruned = await duringPrune(f, 'carried', async (c) => {
      const { rows } = await c.query(`select deleted::int from awa.prune_flows($1::bigint - 1, 100, 0)`, [
        flowId,
      ]);
      return rows;
    });
    expect(pruned).toEqual([{ deleted: 0 }]);
    const { rows } = await f.pool.query(`select name from awa.flows where flow_id = $1::bigint`, [flowId]);
    expect(rows).toEqual([{ name: 'snap' }]);
  });
});
