import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settleAttempts, pruneRing, rotateRing, type ClaimBatch } from '../../src/storage/operations.js';
import { until } from '../helpers/wait.js';
import { claimBatches, settleAll } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// A receipt that skipped a producer's position records it as a gap; that record is the only thing that
// sends a claimer back for the position once its producer commits. A producer takes its positions and then
// reads which slot to write to, so its rows can land in a slot newer than the receipt that recorded the gap.
// Truncating the receipt's slot must not forget the gap: here the producer is held between the two steps (a
// lock on the ring ledger) while the receipt is made, settled and its slot sealed; the job must still run.
// (Found by prune-race.test.ts under load: a producer's whole lane run was truncated unclaimed.)

describe('ring prune and open gaps', () => {
  let f: StorageFixture;
  const claim = (queue: string, db: pg.ClientBase | pg.Pool = f.pool) =>
    claimBatches(f.storage, db, {
      queue,
      max: 100,
      instanceId: 'gap',
      agingSeconds: 3600,
      deadlineSeconds: 0,
    });
  const complete = (db: pg.ClientBase | pg.Pool, batches: ClaimBatch[]) =>
    settleAttempts(db, f.schema, settleAll(batches, 'completed'));
  const PRUNE = { lockTimeoutMs: 100, carryLimit: 0, carryAfterSlots: 16 };
  const ids = (batches: ClaimBatch[]) => batches.flatMap((b) => b.jobs.map((j) => j.id));
  const currentSlot = async () => (await f.pool.query(`select awa.current_slot() as s`)).rows[0].s as number;

  beforeAll(async () => {
    f = await storageFixture('prune_gaps');
  });
  afterAll(async () => {
    await f.close();
  });

  it('a gap whose rows land in a newer slot outlives the truncation of the receipt that recorded it', async () => {
    // The lane exists and has a claimed, settled position 1.
    await f.client.enqueue('k', { n: 'warm' }, { queue: 'late' });
    await complete(f.pool, await claim('late'));
    const firstSlot = await currentSlot();

    const ledger = await f.pool.connect();
    const late = new pg.Client({ connectionString: f.url });
    await late.connect();
    let lateId: string;
    try {
      const latePid = (await late.query('select pg_backend_pid() as pid')).rows[0].pid as number;
      await late.query('begin');
      await ledger.query('begin');
      await ledger.query('lock table awa.ring_rotations in access exclusive mode');
      // The late producer takes position 2, then waits to read the current slot.
      const lateEnqueue = f.client.enqueue('k', { n: 'late' }, { client: late, queue: 'late' });
      await until('the late producer to take its position and wait on the ledger', async () => {
        const { rows } = await f.pool.query(
          `select (select pg_sequence_last_value(enqueue_seq) from awa.lanes where queue = 'late' and priority = 2 and not bulk)
                    as enq,
                  (select wait_event_type from pg_stat_activity where pid = $1) as waiting`,
          [latePid],
        );
        return rows[0].enq === '2' && rows[0].waiting === 'Lock';
      });
      // Meanwhile (in the ledger's transaction, which can read the ring): position 3 is enqueued, claimed with
      // position 2 recorded as a gap, and settled; the ring rotates, sealing the receipt's slot.
      const onTime = await f.client.enqueue('k', { n: 'on time' }, { client: ledger, queue: 'late' });
      const batches = await claim('late', ledger);
      expect(ids(batches)).toEqual([onTime.id]);
      await complete(ledger, batches);
      expect(await rotateRing(ledger, f.schema)).toBe((firstSlot + 1) % 16);
      await ledger.query('commit');
      // The late producer reads the new slot and writes its row there, still uncommitted; a claim in the
      // meantime finds nothing to take (and caches the lane's high-water past the gap).
      lateId = (await lateEnqueue).id;
      expect(await claim('late')).toEqual([]);
      // The receipt's slot is spent: truncated while the gap is still open.
      expect(await pruneRing(f.pool, f.schema, PRUNE)).toMatchObject({ slot: firstSlot, outcome: 'pruned' });
      await late.query('commit');
    } finally {
      ledger.release();
      await late.end();
    }
    const { rows } = await f.pool.query(`select slot from awa.ready_entries where job_id = $1`, [lateId]);
    expect(rows).toEqual([{ slot: (firstSlot + 1) % 16 }]);

    // The late job is still found through its gap, once.
    const lateBatches = await claim('late');
    expect(ids(lateBatches)).toEqual([lateId]);
    expect(await claim('late')).toEqual([]);
    expect((await complete(f.pool, lateBatches)).has(lateId)).toBe(true);
    expect(await f.client.getJob(lateId)).toMatchObject({ state: 'completed' });

    // Rotating and pruning the rest of the ring leaves each job in compact history exactly once.
    for (let i = 0; i < 4; i++) {
      await rotateRing(f.pool, f.schema);
      await pruneRing(f.pool, f.schema, PRUNE);
    }
    expect((await f.pool.query(`select count(*)::int as n from awa.ready_entries`)).rows[0].n).toBe(0);
    const history = await f.pool.query<{ id: string; n: number }>(
      `select g::text as id, count(*)::int as n
         from awa.completed_history h, unnest(h.ids) r, generate_series(lower(r), upper(r) - 1) g
        group by g order by g`,
    );
    expect(history.rows.map((r) => r.n)).toEqual([1, 1, 1]);
    expect(history.rows.map((r) => r.id)).toContain(lateId);
  });
});
