import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AwaClient,
  CancelJob,
  ConnectionError,
  defineHandler,
  defineJob,
  FailJob,
  InvalidOptionError,
  RetryAfter,
  SchemaNotMigratedError,
  Snooze,
  WorkerHost,
  type AttemptError,
  type AwaError,
  type JobContext,
  type JobRecord,
  type RescuedAttempt,
  type Settlement,
  type WorkerOptions,
} from '../../src/index.js';
import { MAX_PROGRESS_BYTES } from '../../src/model/payload.js';
import { attemptProgress } from '../helpers/attempt-state.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { optionError } from '../helpers/option-error.js';

// The worker host against a real database: outcomes, scheduling, ordering, unknown kinds, shutdown,
// leadership and typed errors. Every test uses its own queue, so tests do not see each other's jobs.

let db: TestDatabase;
let client: AwaClient;
const running: WorkerHost[] = [];
const hostErrors: unknown[] = [];

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('worker_host'));
});

afterEach(async () => {
  await stopHosts(running);
  hostErrors.length = 0;
});

afterAll(async () => {
  await stopHosts(running);
  await closeDatabase(client, db);
});

/** A host on the test database with short intervals; stopped after each test. */
function host(queue: string, options: Partial<WorkerOptions> = {}): WorkerHost {
  const h = new WorkerHost({ connectionString: db.url, queues: { [queue]: 4 }, ...QUICK_HOST, ...options });
  h.on('error', (err) => hostErrors.push(err));
  return h;
}

async function start(h: WorkerHost): Promise<WorkerHost> {
  running.push(h);
  await h.start();
  return h;
}

/** Resolves with the first settlement of `jobId` the database accepted that matches `outcome`. */
function settled(h: WorkerHost, jobId: string, outcome?: Settlement['outcome']): Promise<Settlement> {
  return new Promise((resolve) => {
    const listener = (s: Settlement, accepted: boolean) => {
      if (s.jobId !== jobId || !accepted || (outcome && s.outcome !== outcome)) return;
      h.off('settled', listener);
      resolve(s);
    };
    h.on('settled', listener);
  });
}

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 10_000) {
  const until = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function sleepUntil(t: number): Promise<void> {
  await new Promise((r) => setTimeout(r, Math.max(0, t - Date.now())));
}

async function job(id: string): Promise<JobRecord> {
  const record = await client.getJob(id);
  if (!record) throw new Error(`job ${id} not found`);
  return record;
}

// JobRecord types its errors loosely; they are AttemptError records.
const errorsOf = (r: JobRecord): AttemptError[] => (r.meta?.errors ?? []) as AttemptError[];

describe('WorkerHost', () => {
  it('runs a job to completion and the database shows it completed', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'wh_ok', queue: 'q_ok' });
    const seen: { args: unknown; attempt: number; kind: string; queue: string; runLease: number }[] = [];
    const h = host('q_ok').register(kind, (j) => {
      seen.push({ args: j.args, attempt: j.attempt, kind: j.kind, queue: j.queue, runLease: j.runLease });
    });
    const id = (await client.enqueue(kind, { n: 42 })).id;
    expect((await job(id)).state).toBe('available');
    const done = settled(h, id);
    await start(h);
    expect(await done).toMatchObject({ jobId: id, outcome: 'completed', runLease: 1 });
    expect(seen).toEqual([{ args: { n: 42 }, attempt: 1, kind: 'wh_ok', queue: 'q_ok', runLease: 1 }]);
    expect(await job(id)).toMatchObject({ state: 'completed', attempt: 1, runLease: 1, args: { n: 42 } });
    expect(h.stats.completed).toBe(1);
  });

  it('retries a throwing handler with the attempt counted, then completes', async () => {
    const kind = defineJob({ kind: 'wh_retry', queue: 'q_retry', maxAttempts: 5 });
    const attempts: number[] = [];
    const errorsSeen: number[] = [];
    const h = host('q_retry').register(kind, (j) => {
      attempts.push(j.attempt);
      errorsSeen.push(j.errors.length);
      if (j.attempt < 3) throw new RetryAfter(10, `not yet (${j.attempt})`);
    });
    const id = (await client.enqueue(kind, {})).id;
    const done = settled(h, id, 'completed');
    await start(h);
    await done;
    expect(attempts).toEqual([1, 2, 3]);
    // Each attempt sees the errors of the attempts before it.
    expect(errorsSeen).toEqual([0, 1, 2]);
    const r = await job(id);
    expect(r).toMatchObject({ state: 'completed', attempt: 3, runLease: 3 });
    expect(errorsOf(r).map((e) => [e.attempt, e.error])).toEqual([
      [1, 'not yet (1)'],
      [2, 'not yet (2)'],
    ]);
    expect(h.stats.retried).toBe(2);
  });

  it('backs off exponentially after a plain error and fails after maxAttempts with every error recorded', async () => {
    const kind = defineJob({ kind: 'wh_fail', queue: 'q_fail', maxAttempts: 2 });
    const attempts: number[] = [];
    const startedAt: number[] = [];
    const h = host('q_fail').register(kind, (j) => {
      attempts.push(j.attempt);
      startedAt.push(Date.now());
      throw new Error(`boom ${j.attempt}`);
    });
    const id = (await client.enqueue(kind, {})).id;
    const retried = settled(h, id, 'retry');
    const failed = settled(h, id, 'failed');
    await start(h);
    await retried;
    expect(await job(id)).toMatchObject({ state: 'retryable', attempt: 1 });
    // Backoff after attempt 1: 2 s plus up to 25 % jitter. Just before it runs out, the job still waits,
    // although the host polls and promotes every 20 ms.
    await sleepUntil(startedAt[0]! + 1_900);
    expect(attempts).toEqual([1]);
    expect(await job(id)).toMatchObject({ state: 'retryable', attempt: 1 });
    await failed;
    expect(attempts).toEqual([1, 2]);
    // The second attempt ran after the backoff, and soon after it (2.5 s at most, plus promotion and
    // claim, with room for a loaded machine): not after 4 s, as a backoff of 2^(attempt+1) would give.
    const waited = startedAt[1]! - startedAt[0]!;
    expect(waited).toBeGreaterThanOrEqual(2_000);
    expect(waited).toBeLessThan(3_500);
    const r = await job(id);
    expect(r).toMatchObject({ state: 'failed', attempt: 2, maxAttempts: 2 });
    expect(errorsOf(r)).toHaveLength(2);
    expect(errorsOf(r).map((e) => [e.attempt, e.error])).toEqual([
      [1, 'boom 1'],
      [2, 'boom 2'],
    ]);
  }, 15_000);

  it('bounds RetryAfter by maxAttempts', async () => {
    const kind = defineJob({ kind: 'wh_retry_after', queue: 'q_retry_after', maxAttempts: 3 });
    const attempts: number[] = [];
    const h = host('q_retry_after').register(kind, (j) => {
      attempts.push(j.attempt);
      throw new RetryAfter(10, 'still busy');
    });
    const id = (await client.enqueue(kind, {})).id;
    const failed = settled(h, id, 'failed');
    await start(h);
    await failed;
    expect(attempts).toEqual([1, 2, 3]);
    const r = await job(id);
    expect(r).toMatchObject({ state: 'failed', attempt: 3 });
    expect(errorsOf(r).map((e) => e.attempt)).toEqual([1, 2, 3]);
    expect(h.stats).toMatchObject({ retried: 2, failed: 1 });
  });

  it('snoozes without spending an attempt', async () => {
    const kind = defineJob({ kind: 'wh_snooze', queue: 'q_snooze', maxAttempts: 1 });
    const attempts: number[] = [];
    const h = host('q_snooze').register(kind, (j) => {
      attempts.push(j.attempt);
      if (attempts.length === 1) throw new Snooze(10);
    });
    const id = (await client.enqueue(kind, {})).id;
    const done = settled(h, id, 'completed');
    await start(h);
    await done;
    // maxAttempts 1 and two runs: the snooze did not count.
    expect(attempts).toEqual([1, 1]);
    const r = await job(id);
    expect(r).toMatchObject({ state: 'completed', attempt: 1 });
    expect(errorsOf(r)).toEqual([]);
    expect(h.stats).toMatchObject({ snoozed: 1, completed: 1, retried: 0 });
  });

  it('ends a job as cancelled on CancelJob and as failed on FailJob, with attempts left', async () => {
    const cancelKind = defineJob({ kind: 'wh_cancel', queue: 'q_cancel', maxAttempts: 5 });
    const failKind = defineJob({ kind: 'wh_failjob', queue: 'q_cancel', maxAttempts: 5 });
    const calls: string[] = [];
    const h = host('q_cancel')
      .register(cancelKind, () => {
        calls.push('cancel');
        throw new CancelJob('no longer needed');
      })
      .register(failKind, async () => {
        calls.push('fail');
        throw new FailJob('bad input');
      });
    const cancelId = (await client.enqueue(cancelKind, {})).id;
    const failId = (await client.enqueue(failKind, {})).id;
    const cancelled = settled(h, cancelId, 'cancelled');
    const failed = settled(h, failId, 'failed');
    await start(h);
    await Promise.all([cancelled, failed]);
    expect(calls.sort()).toEqual(['cancel', 'fail']);
    const c = await job(cancelId);
    expect(c).toMatchObject({ state: 'cancelled', attempt: 1 });
    expect(errorsOf(c).map((e) => e.error)).toEqual(['no longer needed']);
    const f = await job(failId);
    expect(f).toMatchObject({ state: 'failed', attempt: 1, maxAttempts: 5 });
    expect(errorsOf(f).map((e) => e.error)).toEqual(['bad input']);
  });

  it('records a readable error when a handler throws a non-Error', async () => {
    const stringKind = defineJob({ kind: 'wh_throw_string', queue: 'q_non_error', maxAttempts: 3 });
    const objectKind = defineJob({ kind: 'wh_throw_object', queue: 'q_non_error', maxAttempts: 1 });
    const h = host('q_non_error')
      .register(stringKind, () => {
        // Thrown synchronously…
        throw 'a bare string';
      })
      .register(objectKind, async () => {
        // …and as a rejection.
        throw { code: 42, why: 'a plain object' };
      });
    const stringId = (await client.enqueue(stringKind, {})).id;
    const objectId = (await client.enqueue(objectKind, {})).id;
    const retried = settled(h, stringId, 'retry');
    const failed = settled(h, objectId, 'failed');
    await start(h);
    await Promise.all([retried, failed]);
    const s = await job(stringId);
    expect(s).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(errorsOf(s)).toEqual([
      expect.objectContaining({ attempt: 1, error: 'non-Error thrown: a bare string', name: 'string' }),
    ]);
    const o = await job(objectId);
    expect(o).toMatchObject({ state: 'failed', attempt: 1 });
    expect(errorsOf(o)).toEqual([
      expect.objectContaining({
        attempt: 1,
        error: 'non-Error thrown: {"code":42,"why":"a plain object"}',
        name: 'object',
      }),
    ]);
  });

  it('a thrown value that cannot be read (a throwing getter, a revoked proxy, an unprintable object) fails its own attempt with a readable error; the host runs on', async () => {
    const kind = defineJob<{ how: string }>({ kind: 'wh_unreadable', queue: 'q_unreadable', maxAttempts: 1 });
    const throwers: Record<string, () => unknown> = {
      getter: () => {
        const e = new Error('hidden');
        Object.defineProperty(e, 'message', {
          get() {
            throw new Error('message getter exploded');
          },
        });
        return e;
      },
      proxy: () => {
        const { proxy, revoke } = Proxy.revocable({}, {});
        revoke();
        return proxy;
      },
      unprintable: () => ({
        toJSON() {
          throw new Error('no JSON');
        },
        toString() {
          throw new Error('no string');
        },
      }),
    };
    const h = host('q_unreadable').register(kind, (job) => {
      if (job.args.how === 'plain') throw new Error('plain');
      throw throwers[job.args.how]!();
    });
    const ids = new Map<string, string>();
    for (const how of Object.keys(throwers)) ids.set(how, (await client.enqueue(kind, { how })).id);
    const after = (await client.enqueue(kind, { how: 'plain' })).id;
    const failures = [...ids.values(), after].map((id) => settled(h, id, 'failed'));
    await start(h);
    await Promise.all(failures);
    for (const [how, id] of ids) {
      const j = await job(id);
      expect(j.state, how).toBe('failed');
      expect(errorsOf(j), how).toEqual([
        expect.objectContaining({
          attempt: 1,
          error: expect.stringMatching(/^the handler threw a value that could not be read: .+/),
          name: 'UnreadableThrow',
        }),
      ]);
    }
    // Claimed with them, settled in the same flushes: untouched by its neighbours.
    expect(errorsOf(await job(after))).toEqual([expect.objectContaining({ error: 'plain', name: 'Error' })]);
  });

  it('a handler returning what cannot be awaited (a revoked proxy, a thenable whose then throws) fails its own attempt; its batch-mates run and the host claims on', async () => {
    const kind = defineJob<{ how: string }>({ kind: 'wh_bad_return', queue: 'q_bad_return', maxAttempts: 1 });
    const h = host('q_bad_return').register(kind, (job): unknown => {
      if (job.args.how === 'revoked') {
        const { proxy, revoke } = Proxy.revocable({}, {});
        revoke();
        return proxy;
      }
      if (job.args.how === 'then-getter')
        return {
          get then() {
            throw new Error('then getter exploded');
          },
        };
      if (job.args.how === 'then-throws')
        return {
          then() {
            throw new Error('then() exploded');
          },
        };
      return undefined;
    });
    const hows = ['revoked', 'then-getter', 'then-throws', 'plain'];
    // One claim takes all four: a throw escaping one of them would strand the rest unstarted.
    const ids = (await client.enqueueMany(hows.map((how) => ({ kind, args: { how } })))).map((r) => r.id);
    const outcomes = ids.map((id, i) => settled(h, id, hows[i] === 'plain' ? 'completed' : 'failed'));
    await start(h);
    await Promise.all(outcomes);
    expect(errorsOf(await job(ids[0]!))[0]).toMatchObject({ name: 'TypeError' });
    expect(errorsOf(await job(ids[1]!))[0]).toMatchObject({ error: 'then getter exploded' });
    expect(errorsOf(await job(ids[2]!))[0]).toMatchObject({ error: 'then() exploded' });
    expect((await job(ids[3]!)).state).toBe('completed');
    const later = (await client.enqueue(kind, { how: 'plain' })).id;
    await settled(h, later, 'completed');
    expect(hostErrors).toEqual([]);
  });

  it('a listener that throws (on settled, leadership, error) is reported, never thrown into the host: retries are still promoted and every job ends', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'wh_listener', queue: 'q_listener', maxAttempts: 2 });
    const h = host('q_listener', { leaderElectionIntervalMs: 50 }).register(kind, (job) => {
      if (job.attempt === 1 && job.args.n % 5 === 0) throw new RetryAfter(50);
    });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    const thrown = { settled: 0, leadership: 0, error: 0 };
    h.on('settled', () => {
      thrown.settled++;
      throw new Error('settled listener bug');
    });
    h.on('leadership', () => {
      thrown.leadership++;
      throw new Error('leadership listener bug');
    });
    // The 'error' listener the host() helper added records what the host reports; this one throws too.
    h.on('error', () => {
      thrown.error++;
      throw new Error('error listener bug');
    });
    try {
      const ids = (
        await client.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ kind, args: { n } })))
      ).map((r) => r.id);
      await start(h);
      // The four retried jobs run again only if the leader, whose election the leadership listener broke,
      // still promotes them.
      await waitFor('every job to complete', async () =>
        (await Promise.all(ids.map(async (id) => (await job(id)).state))).every((s) => s === 'completed'),
      );
      expect(thrown.settled).toBe(24);
      expect(thrown.leadership).toBeGreaterThanOrEqual(1);
      expect(thrown.error).toBeGreaterThanOrEqual(thrown.settled + thrown.leadership);
      const reported = hostErrors.filter((e) => (e as AwaError).code === 'AWA_LISTENER_FAILED');
      expect(reported.length).toBe(thrown.settled + thrown.leadership);
      expect((reported[0] as Error).message).toMatch(
        /^A listener of the "(settled|leadership)" event threw: /,
      );
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });

  it('keeps a scheduled job scheduled until runAt, then runs it', async () => {
    const kind = defineJob({ kind: 'wh_scheduled', queue: 'q_scheduled' });
    const starts: { at: number; readyAt: number }[] = [];
    const h = host('q_scheduled').register(kind, (j) => {
      starts.push({ at: Date.now(), readyAt: j.readyAt.getTime() });
    });
    const runAt = new Date(Date.now() + 300);
    const id = (await client.enqueue(kind, {}, { runAt })).id;
    const before = await job(id);
    expect(before.state).toBe('scheduled');
    expect(before.runAt?.getTime()).toBe(runAt.getTime());
    const done = settled(h, id, 'completed');
    await start(h);
    await done;
    expect(starts).toHaveLength(1);
    expect(starts[0]!.at).toBeGreaterThanOrEqual(runAt.getTime());
    // Promotion makes the job ready as of the time it fell due.
    expect(starts[0]!.readyAt).toBe(runAt.getTime());
    expect((await job(id)).state).toBe('completed');
  });

  it('claims by priority first, then FIFO within a priority', async () => {
    const kind = defineJob<{ name: string }>({ kind: 'wh_prio', queue: 'q_prio' });
    const plan: [1 | 2 | 3 | 4, string][] = [
      [3, 'a'],
      [1, 'b'],
      [4, 'c'],
      [2, 'd'],
      [1, 'e'],
      [3, 'f'],
      [2, 'g'],
      [4, 'h'],
      [1, 'i'],
      [2, 'j'],
    ];
    const pg = await client.pool.connect();
    try {
      await pg.query('begin');
      for (const [priority, name] of plan) await client.enqueue(kind, { name }, { priority, client: pg });
      await pg.query('commit');
    } finally {
      pg.release();
    }
    const order: string[] = [];
    const h = host('q_prio', { queues: { q_prio: 1 }, claimBatchSize: 1 }).register(kind, (j) => {
      order.push(j.args.name);
    });
    await start(h);
    await waitFor('every job to complete', () => h.stats.completed === plan.length);
    expect(order).toEqual(['b', 'e', 'i', 'd', 'g', 'j', 'a', 'f', 'c', 'h']);
  });

  it('hands an unknown kind back without losing it; a host that knows the kind runs it later', async () => {
    const known = defineJob({ kind: 'wh_known', queue: 'q_unknown' });
    const mystery = defineJob({ kind: 'wh_mystery', queue: 'q_unknown', maxAttempts: 1 });
    // No maintenance: nothing promotes the handed-back job while we look at it.
    const a = host('q_unknown', { unknownKindDelayMs: 50, maintenance: false }).register(known, () => {});
    const id = (await client.enqueue(mystery, { keep: 'me' })).id;
    const handedBack = settled(a, id, 'snooze');
    await start(a);
    await handedBack;
    await a.stop();
    expect(hostErrors.map((e) => (e as AwaError).code)).toContain('AWA_UNKNOWN_KIND');
    const waiting = await job(id);
    expect(waiting).toMatchObject({ state: 'scheduled', attempt: 0, args: { keep: 'me' } });
    expect(errorsOf(waiting)).toHaveLength(1);
    expect(errorsOf(waiting)[0]!.error).toContain('unknown job kind "wh_mystery"');

    const seen: { attempt: number; args: unknown; errors: number }[] = [];
    const b = host('q_unknown', { unknownKindDelayMs: 50 }).register(mystery, (j) => {
      seen.push({ attempt: j.attempt, args: j.args, errors: j.errors.length });
    });
    const done = settled(b, id, 'completed');
    await start(b);
    await done;
    // maxAttempts 1, yet it ran: the hand-back spent no attempt.
    expect(seen).toEqual([{ attempt: 1, args: { keep: 'me' }, errors: 1 }]);
    expect(await job(id)).toMatchObject({ state: 'completed', attempt: 1 });
  });

  it('stop() stops claiming, waits for a running handler and flushes its completion', async () => {
    const kind = defineJob({ kind: 'wh_graceful', queue: 'q_graceful' });
    const events: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started!: () => void;
    const hasStarted = new Promise<void>((r) => (started = r));
    // Concurrency 1: while the handler runs no claim is in flight, so the job enqueued during stop()
    // can only be claimed if stop() failed to stop claiming (once the handler frees its permit).
    const h = host('q_graceful', { queues: { q_graceful: 1 } }).register(kind, async () => {
      events.push('handler started');
      started();
      await gate;
      events.push('handler finished');
    });
    const id = (await client.enqueue(kind, {})).id;
    await start(h);
    await hasStarted;
    const stopping = h.stop().then(() => events.push('stop resolved'));
    // Enqueued while stopping: must not be claimed.
    const late = (await client.enqueue(kind, {})).id;
    await new Promise((r) => setTimeout(r, 100));
    expect(events).toEqual(['handler started']);
    release();
    await stopping;
    expect(events).toEqual(['handler started', 'handler finished', 'stop resolved']);
    expect((await job(id)).state).toBe('completed');
    expect((await job(late)).state).toBe('available');
  });

  it('stop() called while start() is under way: start() completes, then everything it started stops; a second stop() resolves with the first', async () => {
    const kind = defineJob({ kind: 'wh_start_stop', queue: 'q_start_stop' });
    // Every session of this host carries its own name (the URL's parameter wins over the host's default).
    const name = 'wh_start_stop';
    const sessions = async () =>
      Number(
        (
          await client.pool.query<{ n: string }>(
            'select count(*) as n from pg_stat_activity where application_name = $1',
            [name],
          )
        ).rows[0]!.n,
      );
    let handled = 0;
    const h = host('q_start_stop', {
      connectionString: `${db.url}${db.url.includes('?') ? '&' : '?'}application_name=${name}`,
    }).register(kind, () => void handled++);
    const early = (await client.enqueue(kind, {})).id;
    const order: string[] = [];
    const starting = h.start().then(() => order.push('start resolved'));
    const stopping = h.stop().then(() => order.push('first stop resolved'));
    const again = h.stop().then(() => order.push('second stop resolved'));
    await Promise.all([starting, stopping, again]);
    expect(order).toEqual(['start resolved', 'first stop resolved', 'second stop resolved']);
    // Every connection the host had is closed; the server drops a backend a moment after its client has
    // gone (on a loaded machine, visibly), so its sessions are awaited, then must stay gone.
    await waitFor('its sessions to end', async () => (await sessions()) === 0, 5_000);
    expect(await leaderLockHolders(client.pool)).toEqual([]);
    // Nothing of it runs on: a job enqueued now is never claimed. (The one enqueued before may have been
    // claimed in the moment between start and stop: then it ran and completed, or was handed back unstarted,
    // snoozed to now.)
    const late = (await client.enqueue(kind, {})).id;
    await new Promise((r) => setTimeout(r, 300));
    expect((await job(late)).state).toBe('available');
    expect(['available', 'scheduled', 'completed']).toContain((await job(early)).state);
    expect(handled).toBe((await job(early)).state === 'completed' ? 1 : 0);
    expect(await sessions()).toBe(0);
    await expect(h.start()).rejects.toMatchObject({ code: 'AWA_HOST_STATE' });
    // A host stopped before it ever started takes no connection on the way, and cannot start afterwards.
    const pool = new pg.Pool({ connectionString: db.url, max: 3 });
    const unstarted = new WorkerHost({ pool, queues: { q_start_stop: 1 } });
    await unstarted.stop();
    expect(pool.totalCount).toBe(0);
    await expect(unstarted.start()).rejects.toMatchObject({ code: 'AWA_HOST_STATE' });
    await pool.end();
  });

  it('a claim in flight when stop() begins hands its jobs back unstarted: snoozed to now, no attempt spent', async () => {
    const kind = defineJob({ kind: 'wh_inflight', queue: 'q_inflight' });
    const ran: string[] = [];
    const first = (await client.enqueue(kind, {})).id; // makes the queue's lane
    // The claim is held inside the database on the lane's claim lock (it waits up to 50 ms for it), stop()
    // begins, the lock is released, and the claim returns the job to a stopping host. A try where the claim
    // gave up waiting first leaves the job available (the next try's host may run it); try again.
    let late = '';
    for (let tries = 0; tries < 10; tries++) {
      const h = await start(host('q_inflight').register(kind, async (j) => void ran.push(j.id)));
      await waitFor('the first job', async () => (await job(first)).state === 'completed');
      const blocker = new pg.Client({ connectionString: db.url });
      await blocker.connect();
      try {
        await blocker.query('begin');
        await blocker.query(
          `select pg_advisory_xact_lock(awa.lock_ns('claim'), l.lane_id) from awa.lanes l where l.queue = 'q_inflight'`,
        );
        late = (await client.enqueue(kind, {})).id; // wakes the host; its claim waits on the lock
        await waitFor(
          "the host's claim to wait for the lane",
          async () =>
            (await blocker.query(`select 1 from pg_locks where locktype = 'advisory' and not granted`))
              .rowCount! > 0,
          2_000,
        ).catch(() => {});
        const stopping = h.stop();
        await blocker.query('commit');
        await stopping;
      } finally {
        await blocker.end();
      }
      if ((await job(late)).state !== 'available') break;
    }
    expect(await job(late)).toMatchObject({ state: 'scheduled', attempt: 0 });
    expect(ran).toContain(first);
    expect(ran).not.toContain(late);
  });

  it('stop() aborts the signal of a handler still running after shutdownTimeoutMs', async () => {
    const kind = defineJob({ kind: 'wh_abort', queue: 'q_abort', maxAttempts: 3 });
    let abortReason: unknown;
    let started!: () => void;
    const hasStarted = new Promise<void>((r) => (started = r));
    const h = host('q_abort', { shutdownTimeoutMs: 50 }).register(kind, (_j, ctx) => {
      started();
      return new Promise((_resolve, reject) => {
        ctx.signal.addEventListener('abort', () => {
          abortReason = ctx.signal.reason;
          reject(ctx.signal.reason as Error);
        });
      });
    });
    const id = (await client.enqueue(kind, {})).id;
    await start(h);
    await hasStarted;
    await h.stop();
    expect(abortReason).toBeInstanceOf(Error);
    expect((abortReason as Error).message).toBe('worker host is stopping');
    // The aborted attempt ended with an error: counted and retryable, nothing lost.
    const r = await job(id);
    expect(r).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(errorsOf(r).map((e) => e.error)).toEqual(['worker host is stopping']);
  });

  it('a result arriving after stop() is dropped quietly; the open attempt is rescued at once, counted, and re-run', async () => {
    const kind = defineJob({ kind: 'wh_late', queue: 'q_late', maxAttempts: 3 });
    let started!: () => void;
    const hasStarted = new Promise<void>((r) => (started = r));
    // No maintenance here: the rescue below must come from the other host, not from this one's own
    // leader (which could still run a queued rescue tick while stopping).
    const h = host('q_late', { shutdownTimeoutMs: 50, maintenance: false }).register(kind, (_j, ctx) => {
      started();
      // Ignores the abort for a while, then fails: after stop() has already finished.
      return new Promise((_resolve, reject) =>
        ctx.signal.addEventListener('abort', () => setTimeout(() => reject(new Error('late')), 300)),
      );
    });
    const id = (await client.enqueue(kind, {})).id;
    await start(h);
    await hasStarted;
    const errorsBefore = hostErrors.length;
    await h.stop();
    await new Promise((r) => setTimeout(r, 500));
    expect(hostErrors.slice(errorsBefore)).toEqual([]);
    expect(await job(id)).toMatchObject({ state: 'running', attempt: 1, runLease: 1 });

    // Another host leads maintenance. Its staleness window is the default 30 s, yet it rescues the
    // attempt at once: the stopped host marked itself stopped.
    const reruns: number[] = [];
    const b = host('q_late', { rescueIntervalMs: 50 }).register(kind, (j) => {
      reruns.push(j.attempt);
    });
    expect(b.config.heartbeatStalenessMs).toBe(30_000);
    const rescued = new Promise<RescuedAttempt[]>((resolve) =>
      b.on('rescue', (list) => {
        const mine = list.filter((r) => r.jobId === id);
        if (mine.length > 0) resolve(mine);
      }),
    );
    const done = settled(b, id, 'completed');
    const startedB = Date.now();
    await start(b);
    expect(await rescued).toEqual([
      { jobId: id, runLease: 1, instanceId: h.config.instanceId, reason: 'worker_lost', outcome: 'retry' },
    ]);
    expect(Date.now() - startedB).toBeLessThan(10_000);
    // Rescued as a retry with the attempt counted: backoff, then a second attempt that completes.
    await done;
    expect(reruns).toEqual([2]);
    const r = await job(id);
    expect(r).toMatchObject({ state: 'completed', attempt: 2, runLease: 2 });
    expect(errorsOf(r).map((e) => [e.attempt, e.error])).toEqual([
      [1, `rescued: worker ${h.config.instanceId} stopped heartbeating`],
    ]);
  }, 20_000);

  it('a handler asking for an impossible delay fails its own attempt only; the rest of the flush lands', async () => {
    const bad = defineJob({ kind: 'wh_bad_delay', queue: 'q_delay', maxAttempts: 1 });
    const good = defineJob({ kind: 'wh_good_delay', queue: 'q_delay' });
    const h = host('q_delay', { settleFlushMs: 20 });
    h.register(bad, () => {
      throw new RetryAfter(Number.NaN);
    });
    h.register(good, () => {});
    const [badId, goodId] = (
      await client.enqueueMany([
        { kind: bad, args: {} },
        { kind: good, args: {} },
      ])
    ).map((r) => r.id);
    const done = Promise.all([settled(h, badId!), settled(h, goodId!)]);
    await start(h);
    await done;
    expect((await job(goodId!)).state).toBe('completed');
    const failed = await job(badId!);
    expect(failed.state).toBe('failed');
    expect(errorsOf(failed)[0]?.error).toContain('RetryAfter.delayMs');
  });

  it('elects exactly one maintenance leader (one backend holds the lock), and another takes over when it stops', async () => {
    const a = host('q_leader');
    const b = host('q_leader');
    const firstLeader = new Promise<WorkerHost>((resolve) => {
      a.once('leadership', (is) => is && resolve(a));
      b.once('leadership', (is) => is && resolve(b));
    });
    await Promise.all([start(a), start(b)]);
    const leader = await firstLeader;
    const other = leader === a ? b : a;
    // Over several election rounds (every 50 ms), the database shows exactly one holder of the leader
    // lock, always the same backend: the leader's dedicated connection.
    const holders = new Set<number>();
    for (let i = 0; i < 10; i++) {
      const now = await leaderLockHolders(client.pool);
      expect(now).toHaveLength(1);
      expect(now[0]!.applicationName).toBe('awa-leader');
      holders.add(now[0]!.pid);
      await new Promise((r) => setTimeout(r, 30));
    }
    expect(holders.size).toBe(1);
    const [firstHolder] = holders;
    expect([a.isLeader, b.isLeader].filter(Boolean)).toHaveLength(1);
    expect(leader.isLeader).toBe(true);
    const takeover = new Promise<boolean>((resolve) => other.once('leadership', resolve));
    await leader.stop();
    expect(leader.isLeader).toBe(false);
    expect(await takeover).toBe(true);
    expect(other.isLeader).toBe(true);
    // The lock moved to another backend, and the old holder's session is gone.
    const after = await leaderLockHolders(client.pool);
    expect(after).toHaveLength(1);
    expect(after[0]!.pid).not.toBe(firstHolder);
    const { rows } = await client.pool.query('select 1 from pg_stat_activity where pid = $1', [firstHolder]);
    expect(rows).toEqual([]);
  });

  it('ctx.progress() of an inline handler, destructured or not, reaches the database through the attempt fence; the latest value wins', async () => {
    const kind = defineJob({ kind: 'wh_progress', queue: 'q_progress' });
    const refused: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started!: (ctx: JobContext) => void;
    const hasStarted = new Promise<JobContext>((r) => (started = r));
    const h = host('q_progress').register(kind, async (_j, ctx) => {
      // Destructured, as handlers often take it: its functions must not need `this`.
      const { progress } = ctx;
      progress({ step: 1 });
      ctx.progress({ step: 2, of: 3 });
      // What cannot be stored throws at the call, typed, and leaves the last good report in place.
      const circular: Record<string, unknown> = {};
      circular.self = circular;
      for (const bad of [{ n: 10n }, circular, { s: 'x'.repeat(MAX_PROGRESS_BYTES) }]) {
        try {
          ctx.progress(bad);
          refused.push('accepted');
        } catch (err) {
          refused.push((err as AwaError).code);
        }
      }
      started(ctx);
      await gate;
    });
    const id = (await client.enqueue(kind, {})).id;
    const done = settled(h, id, 'completed');
    await start(h);
    const ctx = await hasStarted;
    await waitFor(
      'the progress to reach the database',
      async () => (await attemptProgress(client.pool, id, 1)) !== undefined,
    );
    expect(await attemptProgress(client.pool, id, 1)).toEqual({ step: 2, of: 3 });
    expect(refused).toEqual([
      'AWA_PAYLOAD_NOT_SERIALISABLE',
      'AWA_PAYLOAD_NOT_SERIALISABLE',
      'AWA_PAYLOAD_TOO_LARGE',
    ]);
    release();
    await done;
    // A report after the attempt closed is refused by the fence: stop() flushes it, nothing changes.
    ctx.progress({ step: 'late' });
    await h.stop();
    expect(await attemptProgress(client.pool, id, 1)).toEqual({ step: 2, of: 3 });
    expect(hostErrors).toEqual([]);
  });

  it('priorityAgingMs: a low-priority job that has waited long enough overtakes fresh urgent ones', async () => {
    const aged = defineJob<{ name: string }>({ kind: 'wh_aging', queue: 'q_aging' });
    const plain = defineJob<{ name: string }>({ kind: 'wh_no_aging', queue: 'q_no_aging' });
    // The same situation in two queues: a priority-4 job waits 3.2 s, then three priority-1 jobs arrive.
    await client.enqueueMany([
      { kind: aged, args: { name: 'old' }, options: { priority: 4 } },
      { kind: plain, args: { name: 'old' }, options: { priority: 4 } },
    ]);
    await new Promise((r) => setTimeout(r, 3_200));
    await client.enqueueMany(
      ['u1', 'u2', 'u3'].flatMap((name) => [
        { kind: aged, args: { name }, options: { priority: 1 as const } },
        { kind: plain, args: { name }, options: { priority: 1 as const } },
      ]),
    );
    // One job at a time, so the order of claims is the order of runs.
    const agedOrder: string[] = [];
    const plainOrder: string[] = [];
    const withAging = host('q_aging', { queues: { q_aging: 1 }, claimBatchSize: 1, priorityAgingMs: 1_000 });
    withAging.register(aged, (j) => {
      agedOrder.push(j.args.name);
    });
    // The default aging (one level per 60 s) changes nothing in 3 s.
    const without = host('q_no_aging', { queues: { q_no_aging: 1 }, claimBatchSize: 1, maintenance: false });
    without.register(plain, (j) => {
      plainOrder.push(j.args.name);
    });
    await Promise.all([start(withAging), start(without)]);
    await waitFor(
      'both queues to drain',
      () => withAging.stats.completed === 4 && without.stats.completed === 4,
    );
    // Aged one level per second, the old job is as urgent as the new ones after 3 s, and older.
    expect(agedOrder).toEqual(['old', 'u1', 'u2', 'u3']);
    expect(plainOrder).toEqual(['u1', 'u2', 'u3', 'old']);
  }, 15_000);

  it('registerAll registers every handler of a list, and refuses a kind registered twice', async () => {
    const a = defineJob<{ n: number }>({ kind: 'wh_all_a', queue: 'q_all' });
    const b = defineJob<{ label: string }>({ kind: 'wh_all_b', queue: 'q_all' });
    const seen: string[] = [];
    // Entries of kinds with typed (and different) args go in one list as they are: registerAll takes
    // AnyHandlerEntry (it once took HandlerEntry<never>, which no typed entry is, and needed a cast here).
    const entries = [
      defineHandler(a, (j) => {
        seen.push(`a${j.args.n}`);
      }),
      defineHandler(b, (j) => {
        seen.push(`b${j.args.label}`);
      }),
    ];
    const h = host('q_all').registerAll(entries);
    const again = [defineHandler(b, () => {})];
    expect(() => h.registerAll(again)).toThrow(InvalidOptionError);
    const [ida, idb] = (
      await client.enqueueMany([
        { kind: a, args: { n: 1 } },
        { kind: b, args: { label: '2' } },
      ])
    ).map((r) => r.id);
    const done = Promise.all([settled(h, ida!, 'completed'), settled(h, idb!, 'completed')]);
    await start(h);
    await done;
    expect(seen.sort()).toEqual(['a1', 'b2']);
    expect((await job(ida!)).state).toBe('completed');
    expect((await job(idb!)).state).toBe('completed');
    expect(hostErrors).toEqual([]);
  });

  describe('typed errors', () => {
    it('rejects start() on an unmigrated database with SchemaNotMigratedError', async () => {
      const empty = await createTestDatabase('unmigrated');
      try {
        const h = new WorkerHost({ connectionString: empty.url });
        const err = await h.start().then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(SchemaNotMigratedError);
        expect((err as SchemaNotMigratedError).code).toBe('AWA_SCHEMA_NOT_MIGRATED');
        expect((err as Error).message).toContain('awa migrate');
      } finally {
        await empty.drop();
      }
    });

    it('rejects bad worker options with InvalidOptionError naming the field', () => {
      const field = (options: WorkerOptions): string => {
        const err = optionError(() => new WorkerHost(options));
        expect(err.code).toBe('AWA_INVALID_OPTION');
        return err.field;
      };
      const url = db.url;
      expect(field({ connectionString: url, queues: { default: { concurrency: 0 } } })).toBe(
        'queues.default.concurrency',
      );
      expect(field({ connectionString: url, queues: { mail: -1 } })).toBe('queues.mail.concurrency');
      for (const prefetch of [-1, 1.5, '4', Number.NaN])
        expect(field({ connectionString: url, queues: { mail: { prefetch } as never } })).toBe(
          'queues.mail.prefetch',
        );
      expect(
        () => new WorkerHost({ connectionString: url, queues: { mail: { prefetch: 0 } } }),
      ).not.toThrow();
      expect(field({ connectionString: url, pollIntervalMS: 20 } as WorkerOptions)).toBe(
        'options.pollIntervalMS',
      );
      expect(field({})).toBe('connectionString');
      expect(field({ connectionString: 'mysql://localhost/db' })).toBe('connectionString');
      expect(field({ connectionString: url, claimBatchSize: 0 })).toBe('claimBatchSize');
      expect(field({ connectionString: url, queues: {} })).toBe('queues');
      expect(field({ connectionString: url, queryTimeoutMs: 50 })).toBe('queryTimeoutMs');
    });

    it('rejects a pool too small to serve it (LISTEN and the leader each hold one of its connections), naming the field; a pool of the least size drains', async () => {
      const pools = [1, 2, 3].map((max) => new pg.Pool({ connectionString: db.url, max }));
      const [one, two, three] = pools as [pg.Pool, pg.Pool, pg.Pool];
      try {
        for (const [pool, maintenance] of [
          [two, true],
          [one, false],
        ] as const) {
          const err = optionError(() => new WorkerHost({ pool, maintenance, queues: { q_small_pool: 4 } }));
          expect(err.field).toBe('pool');
          expect(err.message).toContain(`needs at least ${maintenance ? 3 : 2}`);
        }
        expect(optionError(() => new WorkerHost({ pool: {} as pg.Pool })).field).toBe('pool');
        // The least size works, with and without maintenance: every job of a claim completes.
        const kind = defineJob({ kind: 'wh_small_pool', queue: 'q_small_pool' });
        for (const [pool, maintenance] of [
          [three, true],
          [two, false],
        ] as const) {
          const h = new WorkerHost({ pool, maintenance, queues: { q_small_pool: 4 }, ...QUICK_HOST });
          h.on('error', (err) => hostErrors.push(err));
          h.register(kind, () => {});
          const ids = (await client.enqueueMany(Array.from({ length: 10 }, () => ({ kind, args: {} })))).map(
            (r) => r.id,
          );
          await start(h);
          await waitFor(`the jobs to complete on a pool of ${pool.options.max}`, async () =>
            (await Promise.all(ids.map(async (id) => (await job(id)).state))).every(
              (st) => st === 'completed',
            ),
          );
          await h.stop();
        }
      } finally {
        await Promise.all(pools.map((p) => p.end()));
      }
    });

    it('rejects start() with ConnectionError when nothing listens at the address', async () => {
      const h = new WorkerHost({ connectionString: 'postgres://postgres@127.0.0.1:1/postgres' });
      const err = await h.start().then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ConnectionError);
      expect((err as ConnectionError).code).toBe('AWA_CONNECTION_FAILED');
      expect((err as Error).message).toContain('127.0.0.1:1');
    });
  });
});
