import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QueueInUseError, UnknownQueueError } from '../../src/index.js';
import type { Actor } from '../../src/model/audit.js';
import { toJobRow } from '../../src/model/enqueue-options.js';
import { defineJob } from '../../src/model/job-kind.js';
import {
  enqueueRows,
  settleAttempts,
  removeQueue,
  setEnqueueShards,
  setQueuePaused,
} from '../../src/storage/operations.js';
import { claimBatches, settleAll } from '../helpers/claim.js';
import { untilWaitingForLock } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Ghost queues and their removal, at the storage level: pause, resume and shards refuse a queue nothing names
// unless asked to create it; remove_queue() deletes an empty queue's settings and lanes, refuses one that holds
// jobs or has a producer in flight, and a producer racing the removal still lands its job in a lane claims read.

const by: Actor = { who: 'test', origin: 'queue-remove.test' };
const kind = defineJob<Record<string, never>>({ kind: 'rm_k' });

describe('queue existence and removal', () => {
  let f: StorageFixture;
  const row = async (queue: string, delayMs?: number) => toJobRow(kind, {}, { queue, delayMs }, 1 << 20);
  const claimIds = async (queue: string) =>
    (
      await claimBatches(f.storage, f.pool, {
        queue,
        max: 10,
        instanceId: 'rm-test',
        agingSeconds: 3600,
        deadlineSeconds: 0,
      })
    ).flatMap((b) => b.jobs.map((j) => j.id));
  /** Claims the queue's jobs and completes them: the queue then holds nothing but history. */
  const drain = async (queue: string) => {
    const batches = await claimBatches(f.storage, f.pool, {
      queue,
      max: 10,
      instanceId: 'rm-test',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
    await settleAttempts(f.pool, f.schema, settleAll(batches, 'completed'));
    return batches.flatMap((b) => b.jobs.map((j) => j.id));
  };
  /** What makes a queue exist: its settings row and its lanes. */
  const controlRows = async (queue: string) => {
    const { rows } = await f.pool.query<{ settings: string; lanes: string }>(
      `select (select count(*) from awa.queue_settings where queue = $1) as settings,
              (select count(*) from awa.lanes where queue = $1) as lanes`,
      [queue],
    );
    return { settings: Number(rows[0]!.settings), lanes: Number(rows[0]!.lanes) };
  };
  const listed = async (queue: string) => (await f.client.counts()).some((c) => c.queue === queue);

  beforeAll(async () => {
    f = await storageFixture('queue_remove');
  });
  afterAll(async () => {
    await f?.close();
  });

  it('pause, resume and shards refuse a queue nothing names, and create it only when asked', async () => {
    await expect(setQueuePaused(f.pool, f.schema, 'rm_ghost', true, by)).rejects.toThrow(UnknownQueueError);
    await expect(setQueuePaused(f.pool, f.schema, 'rm_ghost', false, by)).rejects.toThrow(UnknownQueueError);
    await expect(setEnqueueShards(f.pool, f.schema, 'rm_ghost', 2, by)).rejects.toThrow(
      /No queue "rm_ghost"/,
    );
    expect(await controlRows('rm_ghost')).toEqual({ settings: 0, lanes: 0 });
    expect(await listed('rm_ghost')).toBe(false);

    expect((await setQueuePaused(f.pool, f.schema, 'rm_ghost', true, by, true)).value).toBe(true);
    expect(await listed('rm_ghost')).toBe(true);
    // Known now: no create needed any more.
    expect((await setEnqueueShards(f.pool, f.schema, 'rm_ghost', 2, by)).value).toBe(1);
    expect(await controlRows('rm_ghost')).toEqual({ settings: 1, lanes: 8 });

    expect((await removeQueue(f.pool, f.schema, 'rm_ghost', 30, by)).value).toEqual({
      queue: 'rm_ghost',
      history: 0,
    });
    expect(await controlRows('rm_ghost')).toEqual({ settings: 0, lanes: 0 });
    expect(await listed('rm_ghost')).toBe(false);
    const { rows: seqs } = await f.pool.query(
      `select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'awa' and c.relkind = 'S' and c.relname like 'lane\\_%'`,
    );
    const { rows: lanesLeft } = await f.pool.query<{ n: string }>('select count(*) as n from awa.lanes');
    // Every lane sequence left belongs to a lane that is left: the removed queue's 48 are dropped.
    expect(seqs.length).toBe(Number(lanesLeft[0]!.n) * 6);
    await expect(removeQueue(f.pool, f.schema, 'rm_ghost', 30, by)).rejects.toThrow(UnknownQueueError);
  });

  it('refuses to remove a queue that holds jobs or DLQ entries, naming them, and removes nothing', async () => {
    const [now, later] = await Promise.all([row('rm_full'), row('rm_full', 3_600_000)]);
    await enqueueRows(f.pool, f.schema, [now]);
    await enqueueRows(f.pool, f.schema, [later]);
    await f.pool.query(
      `insert into awa.dlq_entries (job_id, run_lease, kind, queue, priority, args, attempt, max_attempts,
                                    enqueued_at)
       values (nextval('awa.job_id_seq'), 1, 'rm_k', 'rm_full', 2, '{}', 1, 1, now())`,
    );
    const before = await controlRows('rm_full');
    const err = await removeQueue(f.pool, f.schema, 'rm_full', 30, by).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QueueInUseError);
    expect(err).toMatchObject({
      code: 'AWA_QUEUE_IN_USE',
      holds: { available: 1, running: 0, waiting: 0, scheduled: 1, retryable: 0, blocked: 0, dlq: 1 },
      servedBy: [],
      busy: false,
    });
    expect((err as Error).message).toContain(
      'it still holds jobs (1 available, 1 scheduled); it has 1 DLQ entry',
    );
    expect(await controlRows('rm_full')).toEqual(before);
    expect(await claimIds('rm_full')).toHaveLength(1);
  });

  it('a producer still in flight makes the removal refuse; its job is claimable once it commits', async () => {
    await enqueueRows(f.pool, f.schema, [await row('rm_inflight')]);
    expect(await drain('rm_inflight')).toHaveLength(1);
    const producer = await f.pool.connect();
    try {
      await producer.query('begin');
      const id = (await enqueueRows(producer, f.schema, [await row('rm_inflight')]))[0]!.id;
      // The job is not visible yet, but its producer holds the lane: removing now could orphan it.
      const err = await removeQueue(f.pool, f.schema, 'rm_inflight', 30, by).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'AWA_QUEUE_IN_USE', busy: true });
      await producer.query('commit');
      expect(await claimIds('rm_inflight')).toEqual([id]);
    } finally {
      producer.release();
    }
  });

  it('a producer that read a lane before the removal committed lands its job in the new lane, where claims find it', async () => {
    await enqueueRows(f.pool, f.schema, [await row('rm_race')]);
    expect(await drain('rm_race')).toHaveLength(1);
    const oldLanes = (
      await f.pool.query<{ lane_id: number }>(`select lane_id from awa.lanes where queue = 'rm_race'`)
    ).rows;
    const remover = await f.pool.connect();
    const producer = await f.pool.connect();
    try {
      const { rows: pid } = await producer.query<{ pid: number }>('select pg_backend_pid() as pid');
      await remover.query('begin');
      expect((await removeQueue(remover, f.schema, 'rm_race', 30, by)).value.history).toBe(0);
      // The removal is not committed: the producer still sees the lane, and waits for its 'producing' lock.
      const enqueued = row('rm_race').then((r) => enqueueRows(producer, f.schema, [r]));
      await untilWaitingForLock(f.pool, pid[0]!.pid, 'the producer to wait for the removal');
      await remover.query('commit');
      const id = (await enqueued)[0]!.id;
      const { rows: placed } = await f.pool.query<{ lane_id: number; queue: string }>(
        `select r.lane_id, l.queue from awa.ready_entries r left join awa.lanes l using (lane_id)
          where r.job_id = $1`,
        [id],
      );
      // In a lane of the queue as it is now, not in one of the removed lanes.
      expect(placed).toHaveLength(1);
      expect(placed[0]!.queue).toBe('rm_race');
      expect(oldLanes.map((l) => l.lane_id)).not.toContain(placed[0]!.lane_id);
      expect(await claimIds('rm_race')).toEqual([id]);
    } finally {
      await remover.query('rollback').catch(() => {});
      remover.release();
      producer.release();
    }
  });

  it('in a repeatable read transaction that raced the removal, the producer gets a serialization failure to retry', async () => {
    await enqueueRows(f.pool, f.schema, [await row('rm_rr')]);
    expect(await drain('rm_rr')).toHaveLength(1);
    const remover = await f.pool.connect();
    const producer = await f.pool.connect();
    try {
      await producer.query('begin isolation level repeatable read');
      await producer.query('select 1 from awa.lanes limit 1'); // takes the snapshot: the lanes as they are now
      await remover.query('begin');
      await removeQueue(remover, f.schema, 'rm_rr', 30, by);
      await remover.query('commit');
      const err = await row('rm_rr')
        .then((r) => enqueueRows(producer, f.schema, [r]))
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ code: '40001' });
      expect((err as Error).message).toBe(
        'queue "rm_rr" was removed while this transaction enqueued into it',
      );
      await producer.query('rollback');
      // Retried, it creates the queue's lanes again.
      const id = (await enqueueRows(producer, f.schema, [await row('rm_rr')]))[0]!.id;
      expect(await claimIds('rm_rr')).toEqual([id]);
    } finally {
      await producer.query('rollback').catch(() => {});
      remover.release();
      producer.release();
    }
  });
});
