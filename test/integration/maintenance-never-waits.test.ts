import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkerHost, defineJob, type JobRecord } from '../../src/index.js';
import { cleanupHistory, type PruneResult } from '../../src/storage/operations.js';
import { claimBatches } from '../helpers/claim.js';
import { until } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Maintenance never waits on someone else's transaction (issue 8, item 5). Two producers sit idle in their
// transactions: one enqueued into a lane the host serves, one enqueued through SQL into a queue nobody had
// created, so it is creating that queue's lanes. Meanwhile the leader promotes, rescues and prunes, cleanup
// runs, and stop() returns within its timeout.

const SHUTDOWN_MS = 2_000;

describe('maintenance and idle producer transactions', () => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('maintenance_waits');
  });
  afterAll(async () => {
    await f.close();
  });

  it('promotion, rescue, prune and cleanup go on past producers idle in their transactions; stop() returns in time', async () => {
    const work = defineJob<{ n: number }>({ kind: 'mw_job', queue: 'mw' });
    const host = new WorkerHost({
      connectionString: f.url,
      queues: { mw: 4 },
      pollIntervalMs: 50,
      promoteIntervalMs: 50,
      rescueIntervalMs: 100,
      ringIntervalMs: 100,
      ringSlotMinRows: 0,
      leaderElectionIntervalMs: 50,
      shutdownTimeoutMs: SHUTDOWN_MS,
    });
    const prunes: (PruneResult & { t: number })[] = [];
    host.on('prune', (r) => prunes.push({ ...r, t: Date.now() }));
    host.on('error', () => {});
    host.register(work, () => {});
    const state = async (id: string) => (await f.client.getJob(id))?.state;
    const producers: pg.Client[] = [];
    let stopped = false;
    try {
      await host.start();
      // Completed work in the current slot, which then rotates: the slot to prune later. The ring does not
      // turn while its current slot is empty, so the slot current now is the one these jobs go to (read
      // after they complete, their rows may already be pruned).
      const warmSlot = (await f.client.ringStatus()).find((s) => s.role === 'current')!.slot;
      const warm = (await f.client.enqueueMany([0, 1, 2].map((n) => ({ kind: work, args: { n } })))).map(
        (r) => r.id,
      );
      await until('the warm-up jobs to complete', async () =>
        (await Promise.all(warm.map(state))).every((s) => s === 'completed'),
      );
      await until(
        'the ring to rotate',
        async () => (await f.client.ringStatus()).find((s) => s.role === 'current')?.slot !== warmSlot,
      );

      // Producer 1: enqueued into the served lane, then idle in its transaction.
      const p1 = new pg.Client({ connectionString: f.url, application_name: 'idle-producer' });
      producers.push(p1);
      await p1.connect();
      await p1.query('begin');
      const [held] = await f.client.enqueueMany([{ kind: work, args: { n: 100 } }], { client: p1 });
      // The slot it wrote to, from the lock its insert holds (reading the row would lock every slot).
      const heldSlot = Number(
        (
          await f.pool.query<{ relname: string }>(
            `select c.relname from pg_locks l join pg_class c on c.oid = l.relation
              where l.pid = $1 and l.mode = 'RowExclusiveLock' and c.relname ~ '^ready_entries_[0-9]+$'`,
            [(p1 as unknown as { processID: number }).processID],
          )
        ).rows.map((r) => r.relname.replace('ready_entries_', ''))[0],
      );
      expect(held).toBeDefined();
      // Producer 2: enqueues through SQL into a queue with no lanes yet, so it creates them in its own
      // transaction (holding that queue's lane lock and the new sequences until it ends), then idles.
      const scheduled = await f.pool.query<{ job_id: string }>(
        `select job_id::text from awa.enqueue(array['mw_job'], array['mw_new'], array[2]::smallint[],
           array['{"n":1}']::jsonb[], array[3]::smallint[], array[now() + interval '300 ms'], array[null]::jsonb[])`,
      );
      const p2 = new pg.Client({ connectionString: f.url, application_name: 'idle-producer' });
      producers.push(p2);
      await p2.connect();
      await p2.query('begin');
      await p2.query(
        `select awa.enqueue(array['mw_job'], array['mw_new'], array[2]::smallint[], array['{"n":2}']::jsonb[],
           array[3]::smallint[], array[null]::timestamptz[], array[null]::jsonb[])`,
      );
      const idleSince = Date.now();

      // Promotion: a job of the served queue falls due and runs.
      const { id: due } = await f.client.enqueue(work, { n: 200 }, { delayMs: 300 });
      await until('the scheduled job to be promoted and run', async () => (await state(due)) === 'completed');
      // The due job of the queue whose lanes producer 2 is creating waits for it, without blocking anything.
      expect(await state(scheduled.rows[0]!.job_id)).toBe('scheduled');

      // Rescue: a receipt of an instance that never registered is rescued (in a queue this host does not
      // serve, so the host cannot claim the job first).
      const { id: orphan } = await f.client.enqueue(work, { n: 300 }, { queue: 'mw_orphans' });
      const [ghost] = await claimBatches(f.storage, f.pool, {
        queue: 'mw_orphans',
        max: 10,
        instanceId: 'ghost',
        agingSeconds: 3600,
        deadlineSeconds: 0,
      });
      expect(ghost?.jobs.map((j) => j.id)).toEqual([orphan]);
      await until(
        'the orphan to be rescued',
        async () => {
          const job: JobRecord | null = await f.client.getJob(orphan);
          return (
            job?.state === 'retryable' &&
            job.meta?.errors?.[0]?.error === 'rescued: worker ghost stopped heartbeating'
          );
        },
        10_000,
      );

      // Prune: the slot producer 1 wrote to cannot be truncated while it is open (its rows may yet commit),
      // and it is found busy, tick after tick, instead of being waited for.
      await until(
        'the idle producer’s slot to be found busy, twice',
        async () =>
          prunes.filter((p) => p.slot === heldSlot && p.outcome === 'lock_busy' && p.t > idleSince).length >=
          2,
      );
      // (The warm-up slot, before it, was truncated as usual.)
      expect(prunes.some((p) => p.slot === warmSlot && p.outcome === 'pruned')).toBe(true);
      // Cleanup, the same.
      const cleaned = await Promise.race([
        cleanupHistory(f.pool, f.schema, {
          failedRetentionSeconds: 3600,
          dlqRetentionSeconds: 3600,
          completedRetentionSeconds: 3600,
          limit: 1000,
        }),
        new Promise<'stuck'>((r) => setTimeout(() => r('stuck'), 5_000)),
      ]);
      expect(cleaned).not.toBe('stuck');

      // stop() returns within its timeout although both producers are still open.
      const t0 = Date.now();
      await host.stop();
      stopped = true;
      expect(Date.now() - t0).toBeLessThan(SHUTDOWN_MS + 1_500);
      expect(
        (
          await f.pool.query(
            `select count(*)::int as n from pg_stat_activity
              where datname = current_database() and application_name = 'idle-producer' and state = 'idle in transaction'`,
          )
        ).rows[0].n,
      ).toBe(2);
    } finally {
      if (!stopped) await host.stop();
      for (const p of producers) await p.end().catch(() => {});
    }
  }, 60_000);
});
