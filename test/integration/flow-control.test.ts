import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError, UnknownQueueError } from '../../src/index.js';
import { validateLimits } from '../../src/model/limits.js';
import type { ClaimBatch, ClaimResult, Queryable } from '../../src/storage/operations.js';
import { settle } from '../helpers/claim.js';
import { until } from '../helpers/wait.js';
import { duringPrune } from './during-prune.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Flow control (docs/flow-control.md): what a limited queue's claim starts, decided in the database. Claims here
// are made directly (several connections at once where it matters), so every assertion is about which jobs a
// claim started and which wait at the gate, not about timing.

describe('flow control: limits decided in the claim', () => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('limits');
  });
  afterAll(async () => {
    await f.close();
  });

  const claim = (
    queue: string,
    max: number,
    db: Queryable = f.pool,
    instanceId = 'test',
  ): Promise<ClaimResult> =>
    f.storage.claimer.claim(db, { queue, max, instanceId, agingSeconds: 3600, deadlineSeconds: 0 });
  const started = (r: ClaimResult) => r.batches.flatMap((b) => b.jobs.map((j) => j.id));
  const argsOf = (r: ClaimResult) =>
    r.batches.flatMap((b) => b.jobs.map((j) => j.args as { k: string; i: number }));
  const complete = async (r: ClaimResult, ids?: string[]) => {
    const items = r.batches.flatMap((b: ClaimBatch) =>
      b.jobs.filter((j) => !ids || ids.includes(j.id)).map((j) => settle(b, j, 'completed')),
    );
    return f.storage.settler.settleAttempts(f.pool, items);
  };
  const enqueue = async (queue: string, keys: string[]) => {
    const rows = await f.client.enqueueMany(
      keys.map((k, i) => ({ kind: 'lim', args: { k, i }, options: { queue } })),
    );
    return rows.map((r) => r.id);
  };
  // Declared as a host declares them: validated, defaults filled in.
  const limit = (queue: string, limits: object) =>
    f.storage.instances.registerInstance(
      f.pool,
      `declarer-${queue}`,
      [{ queue, dlq: false, concurrency: 1, limits: validateLimits('limits', limits) }],
      'test',
    );
  const countsOf = async (queue: string) => (await f.client.counts()).find((c) => c.queue === queue)!;
  const runningByKey = async (queue: string) => {
    const { rows } = await f.pool.query<{ key: string; n: number }>(
      `select args ->> 'k' as key, count(*)::int as n from awa.jobs where state = 'running' and queue = $1 group by 1`,
      [queue],
    );
    return Object.fromEntries(rows.map((r) => [r.key, r.n]));
  };

  it('starts at most K attempts of a key; the rest wait at the gate as available, and other keys are not held back', async () => {
    await limit('k2', { key: { arg: 'k' }, perKey: { concurrency: 2 } });
    const ids = await enqueue('k2', ['a', 'a', 'a', 'a', 'a', 'b', 'b']);
    const first = await claim('k2', 10);
    expect(started(first)).toEqual([ids[0], ids[1], ids[5], ids[6]]);
    expect(await runningByKey('k2')).toEqual({ a: 2, b: 2 });
    expect(await countsOf('k2')).toMatchObject({ available: 3, running: 4 });
    expect((await f.client.getJob(ids[2]!))?.state).toBe('available');
    // The gate's jobs are the queue's oldest available ones (the lanes hold none now).
    const health = (await f.client.queueHealth()).find((q) => q.queue === 'k2')!;
    expect(health.available).toBe(3);
    expect(health.oldestAvailableAt).not.toBeNull();
    // Nothing more may start, and the claim says when to look again instead of coming back as "empty".
    const again = await claim('k2', 10);
    expect(started(again)).toEqual([]);
    expect(again.limitedRetryMs).toBeGreaterThan(0);
    expect(again.limitedRetryMs).toBeLessThanOrEqual(100);
    // A job at the gate was moved once: its attempt was not spent.
    expect((await f.client.getJob(ids[2]!))?.attempt).toBe(0);
  });

  it('a freed slot lets the oldest job waiting for its key through first, ahead of newer jobs of the key', async () => {
    await limit('fifo', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const ids = await enqueue('fifo', ['a', 'a', 'a']);
    const first = await claim('fifo', 10);
    expect(started(first)).toEqual([ids[0]]);
    const [late] = await enqueue('fifo', ['a']);
    await complete(first);
    const second = await claim('fifo', 10);
    expect(started(second)).toEqual([ids[1]]);
    await complete(second);
    expect(started(await claim('fifo', 10))).toEqual([ids[2]]);
    expect((await f.client.getJob(late!))?.state).toBe('available');
  });

  it('several claimers at once never start more than K of a key, and every job starts exactly once', async () => {
    const K = 3;
    await limit('fleet', { key: { arg: 'k' }, perKey: { concurrency: K } });
    const keys = Array.from({ length: 200 }, (_, i) => `t${i % 20}`);
    const ids = await enqueue('fleet', keys);
    const connections = await Promise.all(Array.from({ length: 4 }, () => f.pool.connect()));
    const seen: string[] = [];
    let maxRunning = 0;
    // What one round started keeps running through the next round's claims, then completes.
    let running: ClaimResult[] = [];
    try {
      for (let round = 0; round < 200 && seen.length < ids.length; round++) {
        const results = await Promise.all(connections.map((c, i) => claim('fleet', 16, c, `claimer-${i}`)));
        const byKey = await runningByKey('fleet');
        maxRunning = Math.max(maxRunning, ...Object.values(byKey));
        expect(Math.max(0, ...Object.values(byKey))).toBeLessThanOrEqual(K);
        for (const r of results) seen.push(...started(r));
        for (const r of running) await complete(r);
        running = results;
      }
    } finally {
      for (const c of connections) c.release();
    }
    expect(maxRunning).toBe(K);
    expect(seen.length).toBe(ids.length);
    expect(new Set(seen).size).toBe(ids.length);
  });

  it('a claim that read the holds before waiting its turn also counts the holds committed while it waited', async () => {
    await limit('turns', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    await enqueue('turns', ['a', 'a', 'a']);
    const [gate, first, second] = await Promise.all([f.pool.connect(), f.pool.connect(), f.pool.connect()]);
    /** Until `n` lock requests of this database wait (claims waiting for the queue's limits lock). */
    const waitingClaims = (n: number) =>
      until(`${n} claims waiting for the limits lock`, async () => {
        const { rows } = await f.pool.query<{ n: number }>(
          `select count(*)::int as n from pg_locks
            where locktype = 'advisory' and not granted
              and database = (select oid from pg_database where datname = current_database())`,
        );
        return rows[0]!.n === n;
      });
    try {
      // The queue's limits lock held here: each claim reads the holds (none yet), then waits its turn.
      await gate.query('begin');
      await gate.query(`select pg_advisory_xact_lock(awa.lock_ns('limits'), hashtext('turns'))`);
      const firstClaim = claim('turns', 1, first, 'first');
      await waitingClaims(1);
      const secondClaim = claim('turns', 5, second, 'second');
      await waitingClaims(2);
      await gate.query('commit');
      // The first claim starts one job of key a and commits its hold while the second waits behind it: the
      // second reads that hold once its turn comes, so both jobs it takes wait at the gate.
      const [a, b] = await Promise.all([firstClaim, secondClaim]);
      expect(started(a)).toHaveLength(1);
      expect(started(b)).toEqual([]);
      expect(await runningByKey('turns')).toEqual({ a: 1 });
      expect(await countsOf('turns')).toMatchObject({ running: 1, available: 2 });
    } finally {
      await gate.query('rollback').catch(() => {});
      for (const c of [gate, first, second]) c.release();
    }
  });

  it('a claim that waited its turn logs its starts, its receipt and its gated members at the moment it decided', async () => {
    await limit('decided', { key: { arg: 'k' }, perKey: { rate: { limit: 1, periodMs: 60_000 } } });
    await enqueue('decided', ['a', 'a']);
    const [gate, claimer] = await Promise.all([f.pool.connect(), f.pool.connect()]);
    try {
      await gate.query('begin');
      await gate.query(`select pg_advisory_xact_lock(awa.lock_ns('limits'), hashtext('decided'))`);
      const waiting = claim('decided', 5, claimer, 'waiter');
      await until('the claim waiting for the limits lock', async () => {
        const { rows } = await f.pool.query<{ n: number }>(
          `select count(*)::int as n from pg_locks
            where locktype = 'advisory' and not granted
              and database = (select oid from pg_database where datname = current_database())`,
        );
        return rows[0]!.n === 1;
      });
      // The claim's transaction began before this moment: it is waiting.
      const released = (await gate.query<{ t: string }>(`select clock_timestamp()::text as t`)).rows[0]!.t;
      await gate.query('commit');
      expect(started(await waiting)).toHaveLength(1);
      const { rows } = await f.pool.query<{ after: boolean; logged: boolean; gated: boolean }>(
        `select b.claimed_at > $1::timestamptz as after,
                exists (select 1 from awa.limit_starts s where s.queue = 'decided' and s.at = b.claimed_at) as logged,
                exists (select 1 from awa.closure_batches c
                         where c.batch_id = b.batch_id and c.outcome = 'settled' and c.closed_at = b.claimed_at) as gated
           from awa.claim_batches b join awa.lanes l on l.lane_id = b.lane_id
          where l.queue = 'decided' and b.instance_id = 'waiter'`,
        [released],
      );
      expect(rows).toEqual([{ after: true, logged: true, gated: true }]);
    } finally {
      await gate.query('rollback').catch(() => {});
      for (const c of [gate, claimer]) c.release();
    }
  });

  // A history once saw the queue run 6 against a limit of 5 while the ring turned: a claim read the holds with a
  // snapshot taken before a prune committed, waited for the prune's lock on the slot, then read the slot truncated
  // (TRUNCATE is not MVCC-safe) and missed the copy the prune carried forward. The hold looked given back.
  it('a hold whose receipt a prune carries forward while a claim waits to read it still counts', async () => {
    await limit('carried', { queue: { concurrency: 1 } });
    await enqueue('carried', ['a', 'b']);
    expect(started(await claim('carried', 5))).toHaveLength(1);
    // Every receipt so far is in a slot the next rotation seals; a prune with carry then moves the open ones.
    const second = await duringPrune(f, 'carried', (c) => claim('carried', 5, c, 'second'));
    // The first attempt still runs: the queue has no room.
    expect(started(second)).toEqual([]);
    expect(await countsOf('carried')).toMatchObject({ running: 1, available: 1 });
  });

  it('a limited claim that rolls back loses nothing: every job still starts once afterwards', async () => {
    // A claim reads each lane once (a transaction of its own). A second pass in the same transaction would store
    // the lanes' cursors past its own receipts (sequences ignore the rollback): a limited claim that sorted twice
    // lost those jobs when its host died mid-statement.
    await limit('rollback', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const ids = await enqueue('rollback', ['a', 'b', 'a', 'b', 'a', 'b', 'a', 'b', 'a', 'b']);
    const c = await f.pool.connect();
    try {
      await c.query('begin');
      // It starts one of each key and sends the other eight to the gate, then its host dies.
      expect(started(await claim('rollback', 10, c))).toEqual([ids[0], ids[1]]);
      await c.query('rollback');
    } finally {
      c.release();
    }
    expect(await countsOf('rollback')).toMatchObject({ available: 10, running: 0 });
    const seen: string[] = [];
    for (let round = 0; round < 30 && seen.length < ids.length; round++) {
      const r = await claim('rollback', 10);
      seen.push(...started(r));
      await complete(r);
    }
    expect([...seen].sort((x, y) => Number(x) - Number(y))).toEqual(ids);
  });

  it('holds the whole queue to its concurrency across claimers', async () => {
    await limit('qcap', { queue: { concurrency: 5 } });
    await enqueue(
      'qcap',
      Array.from({ length: 20 }, (_, i) => `x${i}`),
    );
    const connections = await Promise.all(Array.from({ length: 3 }, () => f.pool.connect()));
    try {
      const results = await Promise.all(connections.map((c) => claim('qcap', 10, c)));
      expect(results.flatMap(started)).toHaveLength(5);
      expect(results.flatMap(started)).toHaveLength(new Set(results.flatMap(started)).size);
      expect(started(await claim('qcap', 10))).toEqual([]);
      await complete(
        results.find((r) => started(r).length > 0)!,
        [results.flatMap(started)[0]!],
      );
      expect(started(await claim('qcap', 10))).toHaveLength(1);
    } finally {
      for (const c of connections) c.release();
    }
  });

  it('a rate starts at most `limit` per window, and at most `burst` in a burst window', async () => {
    await limit('rate', { key: { arg: 'k' }, perKey: { rate: { limit: 4, periodMs: 60_000, burst: 2 } } });
    const ids = await enqueue('rate', ['a', 'a', 'a', 'a', 'a', 'b']);
    // burst 2 of 4 per minute: two at once, then no more within 30 s.
    expect(started(await claim('rate', 10))).toEqual([ids[0], ids[1], ids[5]]);
    const blocked = await claim('rate', 10);
    expect(started(blocked)).toEqual([]);
    expect(blocked.limitedRetryMs).toBe(100);
    // The log holds the starts: one row per claim and key, with how many it started.
    const { rows } = await f.pool.query<{ key: string; n: number }>(
      `select key, sum(n)::int as n from awa.limit_starts where queue = 'rate' group by key order by key`,
    );
    expect(rows).toEqual([
      { key: 'a', n: 2 },
      { key: 'b', n: 1 },
    ]);
  });

  it('a rate window opens again once its oldest start leaves it, and not before', async () => {
    await limit('window', { key: { arg: 'k' }, perKey: { rate: { limit: 2, periodMs: 1_000 } } });
    const ids = await enqueue('window', ['a', 'a', 'a', 'a']);
    const first = await claim('window', 10);
    expect(started(first)).toEqual([ids[0], ids[1]]);
    let second: ClaimResult;
    do {
      second = await claim('window', 10);
    } while (started(second).length === 0);
    expect(started(second)).toEqual([ids[2], ids[3]]);
    // By the database's clock, which is what starts are logged in: the second pair started a period later.
    const { rows } = await f.pool.query<{ gap_ms: number }>(
      `select (extract(epoch from (max(claimed_at) - min(claimed_at))) * 1000)::float8 as gap_ms
         from awa.claim_batches where batch_id = any($1::bigint[])`,
      [[...first.batches, ...second.batches].map((b) => b.batchId)],
    );
    expect(rows[0]!.gap_ms).toBeGreaterThanOrEqual(1_000);
  });

  it('a key given at enqueue (limitKey, TypeScript or SQL) counts instead of the args field', async () => {
    await limit('given', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const a = await f.client.enqueue('lim', { k: 'same' }, { queue: 'given', limitKey: 'one' });
    const b = await f.client.enqueue('lim', { k: 'same' }, { queue: 'given', limitKey: 'two' });
    const { rows } = await f.pool.query<{ id: string }>(
      `select job_id::text as id from awa.insert_job('lim', '{"k": "same"}', '{"queue": "given", "limitKey": "one"}')`,
    );
    expect(started(await claim('given', 10))).toEqual([a.id, b.id]);
    expect((await f.client.getJob(rows[0]!.id))?.state).toBe('available');
    await expect(f.client.enqueue('lim', {}, { queue: 'given', limitKey: '' })).rejects.toMatchObject({
      code: 'AWA_INVALID_OPTION',
      field: 'limitKey',
    });
  });

  it('a running job cancelled or ended gives its slot back to the next claim', async () => {
    await limit('cancelled', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const ids = await enqueue('cancelled', ['a', 'a']);
    expect(started(await claim('cancelled', 10))).toEqual([ids[0]]);
    await f.client.cancel(ids[0]!, 'operator');
    expect(started(await claim('cancelled', 10))).toEqual([ids[1]]);
  });

  it('a job waiting at the gate can be cancelled; it never starts', async () => {
    await limit('gatecancel', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const ids = await enqueue('gatecancel', ['a', 'a', 'a']);
    const first = await claim('gatecancel', 10);
    expect(started(first)).toEqual([ids[0]]);
    await f.client.cancel(ids[1]!, 'not needed');
    expect((await f.client.getJob(ids[1]!))?.state).toBe('cancelled');
    await complete(first);
    expect(started(await claim('gatecancel', 10))).toEqual([ids[2]]);
    expect(await countsOf('gatecancel')).toMatchObject({
      available: 0,
      running: 1,
      cancelled: 1,
      completed: 1,
    });
  });

  it('strict FIFO: a job that will retry keeps its key, and runs again before the next job of the key', async () => {
    await limit('strict', { key: { arg: 'k' }, perKey: { fifo: true } });
    const ids = await enqueue('strict', ['a', 'a']);
    const first = await claim('strict', 10);
    expect(started(first)).toEqual([ids[0]]);
    const [b] = first.batches;
    await f.storage.settler.settleAttempts(f.pool, [
      settle(b!, b!.jobs[0]!, 'retry', { runAt: new Date(Date.now() - 1_000), error: { error: 'again' } }),
    ]);
    // The retrying job holds the key: the next job of the key waits.
    expect(started(await claim('strict', 10))).toEqual([]);
    expect(await f.storage.maintenance.promoteDue(f.pool, 100)).toBe(1);
    const again = await claim('strict', 10);
    expect(argsOf(again)).toEqual([{ k: 'a', i: 0 }]);
    expect(again.batches[0]!.jobs[0]!.attempt).toBe(2);
    await complete(again);
    expect(started(await claim('strict', 10))).toEqual([ids[1]]);
  });

  it('strict FIFO holds across a second retry too, while another attempt of its first claim still runs', async () => {
    await limit('strict2', { key: { arg: 'k' }, perKey: { fifo: true } });
    const ids = await enqueue('strict2', ['a', 'b', 'a']);
    // One claim starts a and b; b keeps running (its receipt row stays), a retries twice.
    const first = await claim('strict2', 10);
    expect(started(first)).toEqual([ids[0], ids[1]]);
    const [b] = first.batches;
    const retryNow = { runAt: new Date(Date.now() - 1_000), error: { error: 'again' } };
    await f.storage.settler.settleAttempts(f.pool, [settle(b!, b!.jobs[0]!, 'retry', retryNow)]);
    expect(await f.storage.maintenance.promoteDue(f.pool, 100)).toBe(1);
    const second = await claim('strict2', 10);
    expect(argsOf(second)).toEqual([{ k: 'a', i: 0 }]);
    const [b2] = second.batches;
    await f.storage.settler.settleAttempts(f.pool, [settle(b2!, b2!.jobs[0]!, 'retry', retryNow)]);
    expect(await f.storage.maintenance.promoteDue(f.pool, 100)).toBe(1);
    // Its third attempt runs in its own slot, ahead of the key's next job.
    const third = await claim('strict2', 10);
    expect(argsOf(third)).toEqual([{ k: 'a', i: 0 }]);
    expect(third.batches[0]!.jobs[0]!.attempt).toBe(3);
    expect((await f.client.getJob(ids[2]!))?.state).toBe('available');
  });

  it('a job waiting at the gate cannot be retried ahead of its limits', async () => {
    await limit('noretry', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const ids = await enqueue('noretry', ['a', 'a']);
    expect(started(await claim('noretry', 10))).toEqual([ids[0]]);
    expect(await f.client.retryJob(ids[1]!)).toMatchObject({ retried: false });
    expect(await f.storage.maintenance.promoteDue(f.pool, 100)).toBe(0);
    expect((await f.client.getJob(ids[1]!))?.state).toBe('available');
  });

  it('an operator override applies at the next claim; reset brings back what the code declared', async () => {
    await limit('override', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const ids = await enqueue('override', ['a', 'a', 'a', 'a']);
    expect(started(await claim('override', 10))).toEqual([ids[0]]);
    expect(await f.client.setQueueLimits('override', { perKey: { concurrency: 3 } })).toEqual({
      key: { arg: 'k' },
      perKey: { concurrency: 3 },
    });
    expect(started(await claim('override', 10))).toEqual([ids[1], ids[2]]);
    // A null section removes the declared one: nothing is limited, so the queue claims as any other.
    expect(await f.client.setQueueLimits('override', { perKey: null })).toBeNull();
    expect(started(await claim('override', 10))).toEqual([ids[3]]);
    expect(await f.client.setQueueLimits('override', null)).toEqual({
      key: { arg: 'k' },
      perKey: { concurrency: 1 },
    });
    // The attempts started under limits still hold their slots; the one started while nothing was limited
    // does not count (docs/flow-control.md, "Changing limits").
    const [state] = await f.client.queueLimits({ queue: 'override' });
    expect(state).toMatchObject({ override: null, running: 3, waiting: 0 });
    await expect(f.client.setQueueLimits('override', { perKey: { concurrency: 0 } })).rejects.toBeInstanceOf(
      InvalidOptionError,
    );
    await expect(f.client.setQueueLimits('override', { perKey: { concurrency: 0 } })).rejects.toMatchObject({
      field: 'limits.perKey.concurrency',
    });
    await expect(
      f.client.setQueueLimits('no-such-queue', { queue: { concurrency: 1 } }),
    ).rejects.toBeInstanceOf(UnknownQueueError);
    // A queue limited before its first job: its first jobs start under the limit.
    expect(
      await f.client.setQueueLimits('before-jobs', { queue: { concurrency: 1 } }, { create: true }),
    ).toEqual({
      queue: { concurrency: 1 },
    });
    const first = await enqueue('before-jobs', ['a', 'b']);
    expect(started(await claim('before-jobs', 10))).toEqual([first[0]]);
  });

  it('a claim says whether the queue has a rate now, declared or overridden, so its hosts hold nothing ahead', async () => {
    await limit('paced', { key: { arg: 'k' }, perKey: { concurrency: 5 } });
    await enqueue('paced', ['a', 'b', 'c', 'd']);
    expect((await claim('paced', 1)).rateLimited).toBe(false);
    await f.client.setQueueLimits('paced', { queue: { rate: { limit: 1000 } } });
    expect((await claim('paced', 1)).rateLimited).toBe(true);
    await f.client.setQueueLimits('paced', { queue: null, perKey: { rate: { limit: 1000 } } });
    expect((await claim('paced', 1)).rateLimited).toBe(true);
    await f.client.setQueueLimits('paced', null);
    expect((await claim('paced', 1)).rateLimited).toBe(false);
    await enqueue('plain-paced', ['a']);
    expect((await claim('plain-paced', 1)).rateLimited).toBe(false);
    // A claim that returned no row says nothing.
    expect((await claim('plain-paced', 1)).rateLimited).toBeUndefined();
  });

  it('merges an override over the declared limits field by field, as claims apply them', async () => {
    const declared = validateLimits('l', {
      key: { arg: 'tenant' },
      perKey: { concurrency: 3, rate: { limit: 100 } },
      queue: { concurrency: 50 },
    });
    const effective = async (d: unknown, o: unknown) =>
      (
        await f.pool.query<{ l: unknown }>('select awa.effective_limits($1::jsonb, $2::jsonb) as l', [
          d === null ? null : JSON.stringify(d),
          o === null ? null : JSON.stringify(o),
        ])
      ).rows[0]!.l;
    expect(await effective(declared, { perKey: { rate: null }, queue: { concurrency: 10 } })).toEqual({
      key: { arg: 'tenant' },
      perKey: { concurrency: 3 },
      queue: { concurrency: 10 },
    });
    expect(await effective(declared, { perKey: null, queue: null })).toBeNull();
    expect(await effective(null, null)).toBeNull();
  });

  it('reads what the limits hold now: running and waiting per key, busiest first', async () => {
    await limit('reads', { key: { arg: 'k' }, perKey: { concurrency: 2, rate: { limit: 100 } } });
    await enqueue('reads', ['a', 'a', 'a', 'a', 'b']);
    await claim('reads', 10);
    const [state] = await f.client.queueLimits({ queue: 'reads' });
    expect(state).toMatchObject({
      queue: 'reads',
      declared: {
        key: { arg: 'k' },
        perKey: { concurrency: 2, rate: { limit: 100, periodMs: 1000, burst: 100 } },
      },
      running: 3,
      waiting: 2,
      keys: [
        { key: 'a', running: 2, waiting: 2, recentStarts: 2 },
        { key: 'b', running: 1, waiting: 0, recentStarts: 1 },
      ],
    });
  });

  // The limits read (CLI `awa limits`, the dashboard) ran in milliseconds but took 0.3-2 s: the planner's
  // estimates for its holds over every ring partition passed jit_above_cost, and JIT compiled them every time.
  // auto_explain reports each statement the read runs, nested ones included, and a JIT section where one was
  // compiled; with jit_above_cost 0 every statement that may compile does.
  it('the limits read compiles nothing at run time (JIT), even with every statement over the threshold', async () => {
    await limit('nojit', { key: { arg: 'k' }, perKey: { concurrency: 1, fifo: true } });
    await enqueue('nojit', ['a', 'a', 'b']);
    expect(started(await claim('nojit', 10))).toHaveLength(2);
    const c = await f.pool.connect();
    const notices: string[] = [];
    c.on('notice', (n) => notices.push(n.message ?? ''));
    try {
      await c.query('begin');
      await c.query(`load 'auto_explain'`);
      await c.query(
        `set local auto_explain.log_min_duration = 0; set local auto_explain.log_nested_statements = on;
         set local auto_explain.log_analyze = on; set local client_min_messages = log;
         set local jit = on; set local jit_above_cost = 0`,
      );
      const { rows } = await c.query<{ jit: boolean }>(`select pg_jit_available() as jit`);
      if (rows[0]!.jit) {
        // The probe sees a compilation where one happens.
        notices.length = 0;
        await c.query(`select sum(g) from generate_series(1, 10) g`);
        expect(notices.some((m) => m.includes('JIT:'))).toBe(true);
      }
      notices.length = 0;
      const call = `select running from awa.queue_limits('nojit', 20)`;
      const read = await c.query<{ running: string }>(call);
      expect(read.rows).toEqual([{ running: '2' }]);
      // Its nested statements were reported (the holds, the gate), none with a compilation. (The call itself is
      // this session's own statement, compiled at cost 0.)
      const nested = notices.filter((m) => !m.includes(`Query Text: ${call}`));
      expect(nested.filter((m) => m.includes('held_in')).length).toBeGreaterThan(0);
      expect(nested.filter((m) => m.includes('JIT:')).map((m) => m.slice(0, 300))).toEqual([]);
    } finally {
      await c.query('rollback').catch(() => {});
      c.release();
    }
  });

  it('a paused limited queue starts nothing, not even jobs waiting at the gate', async () => {
    await limit('paused', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const ids = await enqueue('paused', ['a', 'a']);
    const first = await claim('paused', 10);
    await complete(first);
    await f.client.pauseQueue('paused');
    expect(started(await claim('paused', 10))).toEqual([]);
    await f.client.resumeQueue('paused');
    expect(started(await claim('paused', 10))).toEqual([ids[1]]);
  });

  it('an unlimited queue claims as before: no gate, no holds, no rate log', async () => {
    const ids = await enqueue('plain', ['a', 'a', 'a']);
    const r = await claim('plain', 10);
    expect(started(r)).toEqual(ids);
    expect(r.limitedRetryMs).toBeUndefined();
    const { rows } = await f.pool.query<{ holds: number; gated: number; starts: number }>(
      `select (select count(*)::int from awa.limit_holds where queue = 'plain') as holds,
              (select count(*)::int from awa.deferred_jobs where queue = 'plain') as gated,
              (select count(*)::int from awa.limit_starts where queue = 'plain') as starts`,
    );
    expect(rows[0]).toEqual({ holds: 0, gated: 0, starts: 0 });
  });
  it('a claim looks at a bounded number of the keys waiting at the gate, and over claims lets each of them through', async () => {
    await limit('many', { key: { arg: 'k' }, perKey: { concurrency: 1 } });
    const keys = Array.from({ length: 150 }, (_, i) => `m${i}`);
    const ids = await enqueue(
      'many',
      keys.flatMap((k) => [k, k]),
    );
    const first = await claim('many', 300);
    // Each key's first job starts; its second waits at the gate.
    expect(started(first).sort()).toEqual(ids.filter((_, i) => i % 2 === 0).sort());
    await complete(first);
    // One claim reads at most max(64, 2 x asked) waiting keys, from a random point of their hash order...
    const look = async () =>
      (await f.pool.query<{ key: string }>(`select key from awa.gate_keys('many', 64)`)).rows.map(
        (r) => r.key,
      );
    const seen = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const some = await look();
      expect(some.length).toBe(64);
      expect(new Set(some).size).toBe(64);
      for (const k of some) seen.add(k);
    }
    // ...and over claims every waiting key is looked at.
    expect(seen.size).toBe(150);
    // Claims of 10 (64 keys looked at each) let every waiting job through, each once, one per key at a time.
    const second: string[] = [];
    for (let round = 0; round < 100 && second.length < 150; round++) {
      const r = await claim('many', 10);
      const got = argsOf(r).map((a) => a.k);
      expect(new Set(got).size).toBe(got.length);
      second.push(...started(r));
      await complete(r);
    }
    expect(second.sort()).toEqual(ids.filter((_, i) => i % 2 === 1).sort());
    expect(await countsOf('many')).toMatchObject({ available: 0, running: 0 });
  });
});
