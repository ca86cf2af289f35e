import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pruneRing, rotateRing, settleAttempts } from '../../src/storage/operations.js';
import { claimBatches, settleAll } from '../helpers/claim.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// The public jobs view (sql/functions/reads/jobs.sql, docs/sql.md): what its reads cost beside a backlog and a
// terminal history (their plans, read with EXPLAIN: every branch an index or a bounded set), that it refuses
// writes saying what to use, and that a completed job whose body was pruned is found in completed_ids.

const BACKLOG = 20_000;
const HISTORY = 5_000;

describe('the jobs view', () => {
  let f: StorageFixture;
  let backlogIds: string[];

  const plan = async (sql: string, params: unknown[] = []) => {
    const { rows } = await f.pool.query<{ 'QUERY PLAN': string }>(`explain ${sql}`, params);
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  };
  /** The tables a plan scans whole that are not empty (the planner rightly scans an empty partition). */
  const costlySeqScans = (p: string) =>
    [...p.matchAll(/Seq Scan on (\w+) \w+ {2}\(cost=[\d.]+\.\.([\d.]+)/g)]
      .filter((m) => Number(m[2]) > 50)
      .map((m) => m[1]);

  beforeAll(async () => {
    f = await storageFixture('jobs_view');
    // A backlog, and a terminal history far larger than a page: rows a read by id or by state must not walk.
    const loaded = await f.client.copyEnqueue(
      Array.from({ length: BACKLOG }, (_, i) => ({
        kind: 'backlog',
        args: { i },
        options: { queue: 'big' },
      })),
    );
    expect(loaded.inserted).toBe(BACKLOG);
    const { rows } = await f.pool.query<{ id: string }>(
      `select job_id::text as id from awa.ready_entries where queue = 'big' order by job_id`,
    );
    backlogIds = rows.map((r) => r.id);
    await f.pool.query(
      `insert into awa.done_entries (job_id, run_lease, state, kind, queue, priority, args, attempt, max_attempts,
                                     enqueued_at)
       select -g, 1, 'failed', 'old', 'history', 2, '{}', 1, 1, now() from generate_series(1, $1) g`,
      [HISTORY],
    );
    await f.pool.query('analyze');
  }, 120_000);
  afterAll(async () => {
    await f.close();
  });

  it('a read by id probes every plane through an index', async () => {
    const id = backlogIds[BACKLOG / 2]!;
    const p = await plan('select * from awa.jobs where id = $1', [id]);
    expect(costlySeqScans(p)).toEqual([]);
    expect(p).toMatch(/Index Scan using done_entries_pkey/);
    expect(p).toMatch(/Index Scan using ready_entries_\d+_job_id/);
    const { rows } = await f.pool.query(
      'select j.id::text as id, j.state, j.attempt from awa.jobs j where j.id = $1',
      [id],
    );
    expect(rows).toEqual([{ id, state: 'available', attempt: 0 }]);
  });

  it('a page of one state off the ring reads only its table, by index, newest first', async () => {
    const p = await plan(
      `select * from awa.jobs where state = 'failed' and id < 0 order by id desc limit 50`,
    );
    expect(p).not.toContain('ready_entries');
    expect(p).not.toContain('dlq_entries');
    expect(p).toMatch(
      /Index Scan Backward using done_entries_pkey|Index Scan Backward using done_entries_queue/,
    );
    const { rows } = await f.pool.query(
      `select j.id::text as id from awa.jobs j where j.state = 'failed' and j.id < 0 order by j.id desc limit 3`,
    );
    expect(rows.map((r) => r.id)).toEqual(['-1', '-2', '-3']);
  });

  it('a page of available jobs walks the ring by id from the newest, not the whole backlog', async () => {
    const p = await plan(`select id from awa.jobs where state = 'available' order by id desc limit 50`);
    expect(p).toMatch(/Index Scan Backward using ready_entries_\d+_job_id/);
    expect(p).not.toContain('done_entries');
    expect(costlySeqScans(p)).toEqual([]);
    const { rows } = await f.pool.query(
      `select j.id::text as id from awa.jobs j where j.state = 'available' order by j.id desc limit 50`,
    );
    expect(rows.map((r) => r.id)).toEqual(backlogIds.slice(-50).reverse());
  });

  it('refuses writes, saying what to use instead', async () => {
    for (const sql of [
      `insert into awa.jobs (id, state) values (1, 'available')`,
      `update awa.jobs set priority = 1 where queue = 'big'`,
      `delete from awa.jobs where queue = 'big'`,
    ]) {
      const err = (await f.pool.query(sql).then(
        () => null,
        (e: unknown) => e,
      )) as { code?: string; message?: string; hint?: string } | null;
      expect(err?.code).toBe('42809');
      expect(err?.message).toBe('awa.jobs is read-only');
      expect(err?.hint).toContain('insert_job()');
    }
    const { rows } = await f.pool.query(`select count(*)::int as n from awa.jobs where queue = 'big'`);
    expect(rows[0].n).toBe(BACKLOG);
  });

  it('a completed job whose body was pruned leaves the view and is found in completed_ids', async () => {
    const { id } = await f.client.enqueue('short', {}, { queue: 'pruned' });
    const batches = await claimBatches(f.storage, f.pool, {
      queue: 'pruned',
      max: 1,
      instanceId: 'jobs-view',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    await settleAttempts(f.pool, f.schema, settleAll(batches, 'completed'));
    const inView = () => f.pool.query('select state from awa.jobs where id = $1', [id]);
    expect((await inView()).rows).toEqual([{ state: 'completed' }]);
    const compacted = async () =>
      (await f.pool.query('select queue from awa.completed_ids where ids @> $1::bigint', [id])).rows;
    // The ring turns until the job's slot is pruned (the backlog is carried forward each time).
    for (let i = 0; i < 20 && (await compacted()).length === 0; i++) {
      await rotateRing(f.pool, f.schema);
      await pruneRing(f.pool, f.schema, { lockTimeoutMs: 200, carryLimit: 100_000, carryAfterSlots: 1 });
    }
    expect(await compacted()).toEqual([{ queue: 'pruned' }]);
    expect((await inView()).rows).toEqual([]);
    expect(await f.client.getJob(id)).toMatchObject({ state: 'completed', kind: null });
  });
});
