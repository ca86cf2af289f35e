import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  settleAttempts,
  pruneRing,
  registerCallback,
  rotateRing,
  writeProgress,
  type AttemptRef,
  type ClaimBatch,
} from '../../src/storage/operations.js';
import { claimBatches } from '../helpers/claim.js';
import { until } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Prune carries an open receipt out of the slot it truncates, under ACCESS EXCLUSIVE on that slot's
// partitions. A flush naming the receipt by the slot it was claimed in must wait for the prune and then find
// the receipt where it lives now: where it lives has to be decided by the same statement that waited, after
// the wait. (A settle_attempts() that looked the slot up in a statement of its own, before waiting, rejected
// completions that were valid; the chaos suite's connection-loss run caught it as jobs run twice.) Progress
// and callback registration name the receipt the same way and must not mistake a carry for a closed attempt.

describe('writing to an attempt while prune carries its receipt forward', () => {
  let f: StorageFixture;

  beforeAll(async () => {
    f = await storageFixture('settle_carry');
  });
  afterAll(async () => {
    await f.close();
  });

  /** Claims one job of a new queue and seals its slot, so the next prune carries the open receipt. Returns the
   * receipt and its one attempt as the settle, progress and callback calls name it. */
  const openReceipt = async (queue: string): Promise<{ batch: ClaimBatch; attempt: AttemptRef }> => {
    await f.client.enqueueMany([{ kind: 'k', args: {}, options: { queue } }]);
    const [batch] = await claimBatches(f.storage, f.pool, {
      queue,
      max: 10,
      instanceId: 'carry-test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
    expect(batch!.jobs).toHaveLength(1);
    expect(await rotateRing(f.pool, f.schema)).not.toBeNull();
    const job = batch!.jobs[0]!;
    return {
      batch: batch!,
      attempt: {
        claimSlot: batch!.claimSlot,
        batchId: batch!.batchId,
        idx: 1,
        jobId: job.id,
        runLease: job.runLease,
      },
    };
  };

  /** Runs `write` while a prune, in a transaction of its own, holds the receipt's old slot; commits the prune
   * once the write waits behind it, and returns what the write answered. */
  const duringCarry = async <T>(batch: ClaimBatch, write: () => Promise<T>, waiting: string): Promise<T> => {
    const pruner = new pg.Client({ connectionString: f.url });
    await pruner.connect();
    try {
      await pruner.query('begin');
      expect(
        await pruneRing(pruner, f.schema, { lockTimeoutMs: 1_000, carryLimit: 100, carryAfterSlots: 1 }),
      ).toMatchObject({ slot: batch.claimSlot, outcome: 'carried' });
      const answer = write();
      await until(`the ${waiting} to wait behind the prune`, async () => {
        const { rows } = await f.pool.query(
          `select count(*)::int as n from pg_stat_activity
            where datname = current_database() and wait_event_type = 'Lock' and query like $1`,
          [`%${waiting}(%`],
        );
        return rows[0].n === 1;
      });
      await pruner.query('commit');
      return await answer;
    } finally {
      await pruner.end();
    }
  };

  it('a completion that arrives mid-carry waits for the prune, then is accepted through the forward', async () => {
    const { batch, attempt } = await openReceipt('carry_completion');
    const settle = () => settleAttempts(f.pool, f.schema, [{ ...attempt, outcome: 'completed' }]);
    expect([...(await duringCarry(batch, settle, 'settle_attempts'))]).toEqual([attempt.jobId]);
    expect(await f.client.getJob(attempt.jobId)).toMatchObject({ state: 'completed' });
  });

  it('a progress write that arrives mid-carry is kept, not taken for a closed attempt', async () => {
    const { batch, attempt } = await openReceipt('carry_progress');
    const write = () => writeProgress(f.pool, f.schema, { ...attempt, progressJson: '{"n": 1}' });
    expect(await duringCarry(batch, write, 'set_progress')).toBe(true);
    const { rows } = await f.pool.query(
      `select claim_slot, progress from awa.attempt_state where job_id = $1 and run_lease = $2`,
      [attempt.jobId, attempt.runLease],
    );
    // Recorded against the slot the receipt lives in now.
    const current = (await f.pool.query(`select awa.current_slot() as s`)).rows[0].s as number;
    expect(rows).toEqual([{ claim_slot: current, progress: { n: 1 } }]);
    expect(current).not.toBe(batch.claimSlot);
  });

  it('a callback registered mid-carry gets its token', async () => {
    const { batch, attempt } = await openReceipt('carry_callback');
    const register = () => registerCallback(f.pool, f.schema, attempt, 60_000);
    expect(await duringCarry(batch, register, 'register_callback')).toMatch(/^[0-9a-f-]{36}$/);
  });
});
