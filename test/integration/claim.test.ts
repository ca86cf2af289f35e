import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimJobs, type ClaimBatch, type Queryable } from '../../src/storage/operations.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';
import { until } from '../helpers/wait.js';
import { claimBatches } from '../helpers/claim.js';

const ids = (batches: ClaimBatch[]) => batches.flatMap((b) => b.jobs.map((j) => j.id));

describe('claim', () => {
  let f: StorageFixture;
  const claim = (queue: string, max: number, agingSeconds = 3600, db: Queryable = f.pool) =>
    claimBatches(f.storage, db, { queue, max, instanceId: 'test', agingSeconds, deadlineSeconds: 0 });

  beforeAll(async () => {
    f = await storageFixture('claim');
  });
  afterAll(async () => {
    await f.close();
  });

  it('takes lanes in priority order and each lane in enqueue order, incrementing the run lease', async () => {
    const order = (
      await f.client.enqueueMany(
        [3, 1, 2, 1, 3, 2, 4, 1].map((priority, i) => ({
          kind: 'p',
          args: { i },
          options: { queue: 'prio', priority: priority as 1 },
        })),
      )
    ).map((r) => r.id);
    const batches = await claim('prio', 100);
    const byPriority = [1, 2, 3, 4].flatMap((p) => order.filter((_, i) => [3, 1, 2, 1, 3, 2, 4, 1][i] === p));
    expect(ids(batches)).toEqual(byPriority);
    expect(
      batches.every((b) => b.jobs.every((j, k) => j.idx === k + 1 && j.runLease === 1 && j.attempt === 1)),
    ).toBe(true);
    expect(await claim('prio', 100)).toEqual([]);
  });

  it('hands each job over with its kind, args, metadata, attempt, priority and times to the microsecond', async () => {
    const { id } = await f.client.enqueue(
      'fields',
      { text: 'quote " and \\ backslash', n: 1.5, list: [1, null] },
      { queue: 'fields', priority: 3, maxAttempts: 7, metadata: { tenant: 't1' } },
    );
    const { rows } = await f.pool.query(
      `select (extract(epoch from enqueued_at) * 1000)::float8 as enq, (extract(epoch from ready_at) * 1000)::float8 as ready
         from awa.ready_entries where job_id = $1`,
      [id],
    );
    const [job] = (await claim('fields', 1)).flatMap((b) => b.jobs);
    expect(job).toMatchObject({
      id,
      kind: 'fields',
      args: { text: 'quote " and \\ backslash', n: 1.5, list: [1, null] },
      attempt: 1,
      maxAttempts: 7,
      runLease: 1,
      priority: 3,
      meta: { metadata: { tenant: 't1' } },
    });
    expect(job!.enqueuedAtMs).toBeCloseTo(rows[0].enq as number, 3);
    expect(job!.readyAtMs).toBeCloseTo(rows[0].ready as number, 3);
    expect(Math.abs(job!.readyAtMs - Date.now())).toBeLessThan(60_000);
  });

  it('claims in batches of at most max and never hands out a job twice', async () => {
    await f.client.copyEnqueue(
      Array.from({ length: 1000 }, (_, i) => ({ kind: 'b', args: { i }, options: { queue: 'batch' } })),
    );
    const seen: string[] = [];
    for (let round = 0; round < 20; round++) {
      const got = ids(await claim('batch', 64));
      expect(got.length).toBeLessThanOrEqual(64);
      seen.push(...got);
    }
    expect(seen).toHaveLength(1000);
    expect(new Set(seen).size).toBe(1000);
  });

  it('concurrent claimers on separate connections split the queue without overlap', async () => {
    await f.client.copyEnqueue(
      Array.from({ length: 6000 }, (_, i) => ({
        kind: 'c',
        args: { i },
        options: { queue: 'race', priority: ((i % 4) + 1) as 1 },
      })),
    );
    const pools = [1, 2, 3, 4].map(() =>
      new pg.Pool({ connectionString: f.url, max: 1 }).on('error', () => {}),
    );
    try {
      const results = await Promise.all(
        pools.map(async (p) => {
          const mine: string[] = [];
          for (let idle = 0; idle < 5;) {
            const got = ids(await claim('race', 50, 3600, p));
            mine.push(...got);
            idle = got.length === 0 ? idle + 1 : 0;
          }
          return mine;
        }),
      );
      const all = results.flat();
      expect(all).toHaveLength(6000);
      expect(new Set(all).size).toBe(6000);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });

  it('ages a waiting lane ahead of a more urgent fresh one', async () => {
    const [old] = (
      await f.client.enqueueMany([{ kind: 'a', args: {}, options: { queue: 'aging', priority: 4 } }])
    ).map((r) => r.id);
    await new Promise((r) => setTimeout(r, 3_200));
    const [fresh] = (
      await f.client.enqueueMany([{ kind: 'a', args: {}, options: { queue: 'aging', priority: 2 } }])
    ).map((r) => r.id);
    // With aging of one level per second, the priority-4 job waited 3 s: effective priority 1.
    expect(ids(await claim('aging', 1, 1))).toEqual([old]);
    expect(ids(await claim('aging', 1, 1))).toEqual([fresh]);
  });

  it('reports a lane skipped because another claimer holds it, so a short answer is not taken for an empty queue', async () => {
    await f.client.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ kind: 'h', args: { i }, options: { queue: 'held' } })),
    );
    const req = { queue: 'held', instanceId: 'test', agingSeconds: 3600, deadlineSeconds: 0 };
    const holder = await f.pool.connect();
    try {
      // The first claimer's transaction stays open: it holds the lane's claim lock.
      await holder.query('begin');
      const first = await claimJobs(holder, f.schema, { ...req, max: 1 });
      expect(first.batches.flatMap((b) => b.jobs)).toHaveLength(1);
      expect(first.contended).toBe(false);
      const blocked = await claimJobs(f.pool, f.schema, { ...req, max: 10 });
      expect(blocked).toEqual({ batches: [], contended: true, rateLimited: false });
      await holder.query('commit');
    } finally {
      holder.release();
    }
    const after = await claimJobs(f.pool, f.schema, { ...req, max: 10 });
    expect(after.batches.flatMap((b) => b.jobs)).toHaveLength(2);
    expect(after.contended).toBe(false);
    expect(await claimJobs(f.pool, f.schema, { ...req, max: 10 })).toEqual({ batches: [], contended: false });
  });

  it('waits for a lane another claim holds when it is the only lane with work, and takes what that claim left', async () => {
    await f.client.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ kind: 'w', args: { i }, options: { queue: 'turns' } })),
    );
    const req = { queue: 'turns', instanceId: 'test', agingSeconds: 3600, deadlineSeconds: 0 };
    const holder = await f.pool.connect();
    try {
      await holder.query('begin');
      const first = await claimJobs(holder, f.schema, { ...req, max: 1 });
      expect(first.batches.flatMap((b) => b.jobs)).toHaveLength(1);
      // The second claim starts while the lane is held and is answered once the holder commits (inside its wait), with the two jobs the first claim left, instead of coming back empty.
      const waiting = claimJobs(f.pool, f.schema, { ...req, max: 10, waitMs: 10_000 });
      await until(
        'the claim waits on the lane lock',
        async () => {
          const r = await holder.query(
            `select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted`,
          );
          return r.rows[0].n === 1;
        },
        5_000,
        2,
      );
      await holder.query('commit');
      const second = await waiting;
      expect(second.contended).toBe(false);
      expect(second.batches.flatMap((b) => b.jobs.map((j) => j.args))).toEqual([{ i: 1 }, { i: 2 }]);
    } finally {
      holder.release();
    }
  });

  it('an empty queue or unknown queue claims nothing', async () => {
    expect(await claim('nothing-here', 10)).toEqual([]);
  });

  // A speed property no test can time: left to choose, PostgreSQL kept custom plans for the claim and flush
  // statements that read one ring partition by a parameter, and planned them over all sixteen on every call.
  it('claim() and settle_attempts() run with generic plans, so a session plans their ring statements once', async () => {
    const { rows } = await f.pool.query<{ proname: string; proconfig: string[] | null }>(
      `select p.proname, p.proconfig from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = $1 and p.proname in ('claim', 'settle_attempts') order by p.proname`,
      [f.schema.name],
    );
    expect(rows.map((r) => [r.proname, r.proconfig?.includes('plan_cache_mode=force_generic_plan')])).toEqual(
      [
        ['claim', true],
        ['settle_attempts', true],
      ],
    );
  });

  // Same kind of property: a SQL function with a subquery is never inlined, and one that is not inlined is
  // planned again by each statement that calls it (receipt_closed() as SQL was half the cost of a small flush).
  it('the helpers settle_attempts() and prune call on every flush or tick are PL/pgSQL, so their plans are kept', async () => {
    const { rows } = await f.pool.query<{ proname: string; lanname: string }>(
      `select p.proname, l.lanname from pg_proc p
         join pg_namespace n on n.oid = p.pronamespace join pg_language l on l.oid = p.prolang
        where n.nspname = $1 and p.proname in ('receipt_closed', 'receipt_slot', 'slot_has_rows', 'with_error')
        order by p.proname`,
      [f.schema.name],
    );
    expect(rows).toEqual([
      { proname: 'receipt_closed', lanname: 'plpgsql' },
      { proname: 'receipt_slot', lanname: 'plpgsql' },
      { proname: 'slot_has_rows', lanname: 'plpgsql' },
      { proname: 'with_error', lanname: 'plpgsql' },
    ]);
  });
  /** The ring's current slot. */
  const currentSlot = async () =>
    (
      await f.pool.query<{ slot: number }>(
        `select slot from ${f.schema.ident}.ring_rotations order by generation desc limit 1`,
      )
    ).rows[0]!.slot;
  /**
   * The indexes whose names match `pattern` that `run` read on `claimer`, by the statistics `reader` sees:
   * a backend's counters are flushed when it goes idle, so both sides force that flush.
   */
  const indexesRead = async (
    claimer: pg.Client,
    reader: pg.Client,
    pattern: string,
    run: () => Promise<unknown>,
  ) => {
    const scans = async () => {
      await reader.query('select pg_stat_clear_snapshot()');
      const { rows } = await reader.query<{ index: string; scans: string }>(
        `select indexrelname as index, idx_scan::text as scans from pg_stat_user_indexes
          where schemaname = $1 and indexrelname ~ $2`,
        [f.schema.name, pattern],
      );
      return new Map(rows.map((r) => [r.index, Number(r.scans)]));
    };
    await claimer.query('select pg_stat_force_next_flush()');
    const before = await scans();
    await run();
    await claimer.query('select pg_stat_force_next_flush()');
    const after = await until('the claim to be counted', async () => {
      const now = await scans();
      return [...now].some(([k, v]) => v > (before.get(k) ?? 0)) ? now : undefined;
    });
    return [...after].filter(([k, v]) => v > (before.get(k) ?? 0)).map(([k]) => k);
  };

  // And one more: the next job of a lane is nearly always a row of the ring's current slot, so a claim looks
  // for it there first (one partition) and probes all sixteen only when it is not (here: a producer in flight
  // holds the next position).
  it('a claim whose next job sits in the current slot reads that partition of the ring only', async () => {
    const claimer = new pg.Client({ connectionString: f.url });
    const reader = new pg.Client({ connectionString: f.url });
    const held = new pg.Client({ connectionString: f.url });
    await Promise.all([claimer.connect(), reader.connect(), held.connect()]);
    // The partitions whose primary key a claim read.
    const probed = (run: () => Promise<unknown>) =>
      indexesRead(claimer, reader, '^ready_entries_[0-9]+_pkey$', run);
    try {
      const current = `ready_entries_${await currentSlot()}_pkey`;
      await f.client.enqueue('k', { n: 1 }, { queue: 'probe' });
      let got: ClaimBatch[] = [];
      expect(await probed(async () => (got = await claim('probe', 10, 3600, claimer)))).toEqual([current]);
      expect(got.flatMap((b) => b.jobs)).toHaveLength(1);

      await held.query('begin');
      await f.client.enqueue('k', { n: 'held' }, { client: held, queue: 'probe' });
      await f.client.enqueue('k', { n: 3 }, { queue: 'probe' });
      const all = await probed(() => claim('probe', 10, 3600, claimer));
      expect(all).toHaveLength(16);
      await held.query('rollback');
    } finally {
      await Promise.all([claimer.end(), reader.end(), held.end()]);
    }
  });

  // The lane's receipt generation (migration 12): while the ring has not turned since a lane's last claim,
  // the receipts above its cached high-water are all in the current slot, and the heal reads only there.
  // After a turn the last claim's receipt sits in the older slot: the heal reads every slot, finds it, and
  // hands out nothing twice.
  it('a claim reads its lane receipts from the current slot only until the ring turns, then from every slot', async () => {
    const claimer = new pg.Client({ connectionString: f.url });
    const reader = new pg.Client({ connectionString: f.url });
    await Promise.all([claimer.connect(), reader.connect()]);
    // One job enqueued and claimed: its id, what the claim got, and which receipt partitions it read.
    const claimOne = async (n: number) => {
      const id = (await f.client.enqueue('k', { n }, { queue: 'turn' })).id;
      let got: string[] = [];
      const read = await indexesRead(
        claimer,
        reader,
        '^claim_batches_[0-9]+_lane_id_last_seq_idx$',
        async () => {
          got = ids(await claim('turn', 10, 3600, claimer));
        },
      );
      return { id, got, read };
    };
    const index = (slot: number) => `claim_batches_${slot}_lane_id_last_seq_idx`;
    try {
      // The lane's first claim stores the ring's generation; the next one reads one slot.
      const first = await claimOne(1);
      expect(first.got).toEqual([first.id]);
      const before = await currentSlot();
      const steady = await claimOne(2);
      expect(steady.got).toEqual([steady.id]);
      expect(steady.read).toEqual([index(before)]);

      const { rows } = await f.pool.query<{ slot: number | null }>(
        `select ${f.schema.ident}.rotate() as slot`,
      );
      const turned = rows[0]!.slot;
      expect(turned).toBe((before + 1) % 16);
      const across = await claimOne(3);
      expect(across.got).toEqual([across.id]);
      expect(across.read).toHaveLength(16);

      const again = await claimOne(4);
      expect(again.got).toEqual([again.id]);
      expect(again.read).toEqual([index(turned!)]);
    } finally {
      await Promise.all([claimer.end(), reader.end()]);
    }
  });
});
