import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  CancelJob,
  PayloadNotSerialisableError,
  WorkerHost,
  defineJob,
  type JobRecord,
  type WorkerOptions,
} from '../../src/index.js';
import { attemptProgress } from '../helpers/attempt-state.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { migratedDatabase, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// Strings PostgreSQL's jsonb cannot hold (U+0000, a lone UTF-16 surrogate). Producers get a typed error
// naming where the bad value sits, before any SQL, on every path; what the runtime writes on its own
// (handler errors and stacks, progress, cancel reasons) is made storable, and a result the database still
// refuses for its data costs only its own attempt, never the flush it travels in.

const NUL = 'a\u0000b';
const LONE = 'cut \ud83d'; // the first half of an emoji
const REPLACED = 'a\ufffdb';

const FAST: Partial<WorkerOptions> = {
  pollIntervalMs: 20,
  promoteIntervalMs: 20,
  rescueIntervalMs: 100,
  leaderElectionIntervalMs: 50,
  shutdownTimeoutMs: 3_000,
};

let db: TestDatabase;
let client: AwaClient;
let admin: pg.Pool;
const hosts: WorkerHost[] = [];

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('unstorable', { poolSize: 4 }));
  admin = sidePool(db.url, 2, 'unstorable-test');
});
afterEach(async () => {
  await stopHosts(hosts);
});
afterAll(async () => {
  await client?.close();
  await admin?.end();
  await db?.drop();
});

const rejection = async (p: Promise<unknown>): Promise<PayloadNotSerialisableError> => {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PayloadNotSerialisableError);
  return err as PayloadNotSerialisableError;
};

describe('producers: args jsonb cannot hold', () => {
  // [args, the path the error must name]
  const cases: [string, Record<string, unknown>, string][] = [
    ['U+0000 in a value', { order: { note: NUL } }, 'args.order.note'],
    ['U+0000 in a key', { order: { [NUL]: 1 } }, 'args.order (the key "a\\u0000b")'],
    ['a lone surrogate in an array', { lines: ['fine', LONE] }, 'args.lines[1]'],
    ['a lone surrogate in a key', { [LONE]: true }, 'args (the key "cut \\ud83d")'],
  ];

  it.each(cases)(
    '%s: enqueue, enqueueMany and copyEnqueue refuse it with PayloadNotSerialisableError naming the path; nothing is stored',
    async (_label, args, path) => {
      const queue = `bad_args_${cases.findIndex((c) => c[1] === args)}`;
      const kind = defineJob<Record<string, unknown>>({ kind: `bad_args_kind`, queue });
      const errors = [
        await rejection(client.enqueue(kind, args)),
        await rejection(
          client.enqueueMany([
            { kind, args: { ok: 1 } },
            { kind, args },
          ]),
        ),
        await rejection(
          client.copyEnqueue([
            { kind, args: { ok: 1 } },
            { kind, args },
          ]),
        ),
        // On the caller's transaction too, which stays usable.
        await (async () => {
          const c = await admin.connect();
          try {
            await c.query('begin');
            const e = await rejection(client.copyEnqueue([{ kind, args }], { client: c }));
            expect((await c.query('select 1 as ok')).rows).toEqual([{ ok: 1 }]);
            await c.query('commit');
            return e;
          } finally {
            c.release();
          }
        })(),
      ];
      for (const e of errors) {
        expect(e.code).toBe('AWA_PAYLOAD_NOT_SERIALISABLE');
        expect(e.message).toContain(`${path} holds U+0000 or a lone UTF-16 surrogate`);
      }
      const counts = (await client.counts()).find((c) => c.queue === queue);
      const stored = counts
        ? counts.available + counts.scheduled + counts.running + counts.completed + counts.failed
        : 0;
      expect(stored).toBe(0);
    },
  );

  it('escaped text that only looks like a NUL is stored as given', async () => {
    const kind = defineJob<{ s: string }>({ kind: 'escaped_nul', queue: 'escaped_nul' });
    const { id } = await client.enqueue(kind, { s: '\\u0000 and \\ud83d are text here' });
    expect((await client.getJob(id))?.args).toEqual({ s: '\\u0000 and \\ud83d are text here' });
  });

  it('a COPY whose connection is killed mid-stream rejects copyEnqueue, and nothing is left to crash the process', async () => {
    // What would end a user's process: a rejection nobody handles, or an 'error' event nobody listens to.
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    process.on('uncaughtException', onUnhandled);
    const copier = new AwaClient({ connectionString: db.url, poolSize: 1 });
    try {
      const kind = defineJob<{ i: number; pad: string }>({ kind: 'copy_killed', queue: 'copy_killed' });
      const pad = 'x'.repeat(200);
      function* jobs() {
        for (let i = 0; i < 400_000; i++) yield { kind, args: { i, pad } };
      }
      const load = copier.copyEnqueue(jobs(), { chunkSize: 200_000 });
      const outcome = load.then(
        () => 'resolved',
        (e: unknown) => e,
      );
      // The COPY backend, while it receives rows.
      const pid = await until(
        'the COPY to stream',
        async () =>
          (
            await admin.query<{ pid: number }>(
              `select pid from pg_stat_activity
                where datname = current_database() and query like 'copy %ready_entries%' and state = 'active'`,
            )
          ).rows[0]?.pid,
        30_000,
        5,
      );
      expect((await admin.query('select pg_terminate_backend($1) as ok', [pid])).rows[0].ok).toBe(true);
      const err = await outcome;
      expect(err).toBeInstanceOf(Error);
      // Give a stray promise time to reject.
      await new Promise((r) => setTimeout(r, 200));
      expect(unhandled).toEqual([]);
      // Nothing of the load committed.
      expect((await client.counts()).find((c) => c.queue === 'copy_killed')?.available ?? 0).toBe(0);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      process.off('uncaughtException', onUnhandled);
      await copier.close().catch(() => {});
    }
  });
});

describe('what the runtime writes on its own', () => {
  function host(queue: string, options: Partial<WorkerOptions> = {}): WorkerHost {
    const h = new WorkerHost({ connectionString: db.url, queues: { [queue]: 8 }, ...FAST, ...options });
    h.on('error', () => {});
    hosts.push(h);
    return h;
  }
  const errorsOf = (r: JobRecord | null) => (r?.meta?.errors ?? []) as { error: string; stack?: string }[];

  it('handler errors, stacks, progress and cancel reasons holding U+0000 or a lone surrogate are stored with U+FFFD, and the host keeps going', async () => {
    const queue = 'unstorable_results';
    const throwsNul = defineJob<{ n: number }>({ kind: 'throws_nul', queue, maxAttempts: 1 });
    const throwsLone = defineJob<{ n: number }>({ kind: 'throws_lone', queue, maxAttempts: 1 });
    const parsesBinary = defineJob<{ n: number }>({ kind: 'parses_binary', queue, maxAttempts: 1 });
    const cancelsNul = defineJob<{ n: number }>({ kind: 'cancels_nul', queue });
    const progressNul = defineJob<{ n: number }>({ kind: 'progress_nul', queue });
    const plain = defineJob<{ n: number }>({ kind: 'plain', queue });
    const h = host(queue);
    h.register(throwsNul, () => {
      const e = new Error(`bad ${NUL}`);
      e.stack = `Error: bad ${NUL}\n    at ${LONE}`;
      throw e;
    });
    h.register(throwsLone, () => {
      throw new Error(LONE);
    });
    // What V8 says about binary data: its message holds the raw NUL.
    h.register(parsesBinary, () => JSON.parse('{"a":\u0000}'));
    h.register(cancelsNul, () => {
      throw new CancelJob(`stop ${NUL}`);
    });
    const progressLeases = new Map<string, number>();
    h.register(progressNul, async (job, ctx) => {
      progressLeases.set(job.id, job.runLease);
      ctx.progress({ note: NUL, step: LONE });
      // The attempt stays open until its progress flush has landed (a fixed wait lost that race on a busy
      // machine).
      await until(
        'the progress to be written',
        async () => ((await attemptProgress(admin, job.id, job.runLease)) ?? null) !== null,
        30_000,
      );
    });
    h.register(plain, () => {});
    await h.start();
    const ids = (
      await client.enqueueMany([
        { kind: throwsNul, args: { n: 1 } },
        { kind: throwsLone, args: { n: 2 } },
        { kind: parsesBinary, args: { n: 3 } },
        { kind: cancelsNul, args: { n: 4 } },
        { kind: progressNul, args: { n: 5 } },
        ...Array.from({ length: 20 }, (_, n) => ({ kind: plain, args: { n } })),
      ])
    ).map((r) => r.id);
    await until('every job to end', async () => {
      const states = await Promise.all(ids.map(async (id) => (await client.getJob(id))?.state));
      return states.every((s) => s === 'completed' || s === 'failed' || s === 'cancelled');
    });
    const [nulId, loneId, binaryId, cancelId, progressId, ...plainIds] = ids as [string, ...string[]];
    const nul = await client.getJob(nulId);
    expect(nul?.state).toBe('failed');
    expect(errorsOf(nul)[0]?.error).toBe(`bad ${REPLACED}`);
    expect(errorsOf(nul)[0]?.stack).toContain(`bad ${REPLACED}`);
    expect(errorsOf(nul)[0]?.stack).toContain('at cut \ufffd');
    const lone = await client.getJob(loneId!);
    expect(lone?.state).toBe('failed');
    expect(errorsOf(lone)[0]?.error).toBe('cut \ufffd');
    const binary = await client.getJob(binaryId!);
    expect(binary?.state).toBe('failed');
    expect(errorsOf(binary)[0]?.error).toMatch(/^Unexpected token '\ufffd'/);
    expect(errorsOf(binary)[0]?.error).not.toContain('\u0000');
    const cancelled = await client.getJob(cancelId!);
    expect(cancelled?.state).toBe('cancelled');
    expect(errorsOf(cancelled)[0]?.error).toBe(`stop ${REPLACED}`);
    expect((await client.getJob(progressId!))?.state).toBe('completed');
    expect(await attemptProgress(admin, progressId!, progressLeases.get(progressId!)!)).toEqual({
      note: REPLACED,
      step: 'cut \ufffd',
    });
    for (const id of plainIds) expect((await client.getJob(id))?.state).toBe('completed');

    // An operator's cancel reason too.
    const later = defineJob<{ n: number }>({ kind: 'later', queue, maxAttempts: 1 });
    const { id: scheduled } = await client.enqueue(later, { n: 1 }, { delayMs: 3_600_000 });
    expect(await client.cancel(scheduled, `operator ${NUL}`)).toBe('scheduled');
    expect(errorsOf(await client.getJob(scheduled))[0]?.error).toBe(`operator ${REPLACED}`);

    // And the host still works.
    const more = (
      await client.enqueueMany(Array.from({ length: 10 }, (_, n) => ({ kind: plain, args: { n } })))
    ).map((r) => r.id);
    await until('the next jobs to complete', async () =>
      (await Promise.all(more.map(async (id) => (await client.getJob(id))?.state))).every(
        (s) => s === 'completed',
      ),
    );
  });

  it('a result PostgreSQL refuses for its data (SQLSTATE class 22) fails only its own attempt, naming the cause; the rest of its flush commits', async () => {
    const queue = 'refused_result';
    // Real refusal by the database: a trigger that rejects, as invalid data, the backlog row of a retry whose
    // error record says "poison" (what a value PostgreSQL cannot take does to settle_attempts()).
    await admin.query(`
      create function awa_test_refuse_poison() returns trigger language plpgsql as $$
      begin
        if new.meta -> 'errors' -> -1 ->> 'error' = 'poison' then
          raise exception 'test: refused poison' using errcode = '22023';
        end if;
        return new;
      end $$;
      create trigger refuse_poison before insert on awa.deferred_jobs
        for each row execute function awa_test_refuse_poison();`);
    try {
      const poison = defineJob<{ n: number }>({ kind: 'poison', queue, maxAttempts: 3 });
      const good = defineJob<{ n: number }>({ kind: 'good', queue });
      // One flush for the whole lot: results are held for 300 ms.
      const h = host(queue, { settleFlushMs: 300, settleBatchSize: 512 });
      const errors: string[] = [];
      h.on('error', (e) => errors.push(e instanceof Error ? e.message : String(e)));
      h.register(poison, (job) => {
        if (job.attempt === 1) throw new Error('poison');
      });
      h.register(good, () => {});
      await h.start();
      const ids = (
        await client.enqueueMany([
          ...Array.from({ length: 10 }, (_, n) => ({ kind: good, args: { n } })),
          { kind: poison, args: { n: 0 } },
          ...Array.from({ length: 10 }, (_, n) => ({ kind: good, args: { n: n + 10 } })),
        ])
      ).map((r) => r.id);
      const poisonId = ids[10]!;
      const goodIds = ids.filter((id) => id !== poisonId);
      await until('the good jobs to complete', async () =>
        (await Promise.all(goodIds.map(async (id) => (await client.getJob(id))?.state))).every(
          (s) => s === 'completed',
        ),
      );
      // The poisoned attempt still ended as it asked (a retry), without the refused error details, and with
      // an error that names the cause; its second attempt then completed.
      await until(
        'the poisoned job to complete on its retry',
        async () => (await client.getJob(poisonId))?.state === 'completed',
      );
      const job = await client.getJob(poisonId);
      expect(job?.attempt).toBe(2);
      expect(errorsOf(job)).toHaveLength(1);
      expect(errorsOf(job)[0]).toMatchObject({ name: 'SettlementRejected' });
      expect(errorsOf(job)[0]?.error).toContain('test: refused poison');
      expect(errors.some((m) => m.includes('test: refused poison'))).toBe(true);
    } finally {
      await admin.query(
        'drop trigger refuse_poison on awa.deferred_jobs; drop function awa_test_refuse_poison()',
      );
    }
  });
});
