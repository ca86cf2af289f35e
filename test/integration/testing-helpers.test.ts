import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  CancelJob,
  ConnectionError,
  defineHandler,
  defineJob,
  FailJob,
  InvalidOptionError,
  RetryAfter,
  Snooze,
  UnknownKindError,
  WaitForCallback,
  type Job,
  type JobContext,
} from '../../src/index.js';
import {
  CannotRunJobError,
  createTestSchema,
  DrainIncompleteError,
  drainQueue,
  EnqueuedAssertionError,
  expectEnqueued,
  expectNotEnqueued,
  JobRunTimeoutError,
  runJob,
  runJobAgain,
  TestSchema,
  useTestSchema,
  type JobRun,
} from '../../src/testing/index.js';
import { createTestDatabase, sidePool, type TestDatabase } from '../helpers/database.js';

// The test helpers users get as `awa-node/testing`, against a real PostgreSQL: test schemas, the enqueue
// assertions (after commit and inside an open transaction) and their messages, one job through the real worker
// path in every outcome, and drains with the test clock. Last, a node:test file using them runs in a child
// process, as a user's suite under `node --test` would.

let db: TestDatabase;
let side: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase('testing_helpers');
  side = sidePool(db.url, 2);
});
afterAll(async () => {
  await side?.end();
  await db?.drop();
});

/** The test schemas (awa_test_*) that exist in the file's database. */
async function testSchemas(): Promise<string[]> {
  const { rows } = await side.query<{ nspname: string }>(
    `select nspname from pg_namespace where starts_with(nspname, 'awa_test_') order by nspname`,
  );
  return rows.map((r) => r.nspname);
}

/** What `fn` rejects with; fails the test when it resolves. */
async function rejection(fn: () => Promise<unknown>): Promise<Error> {
  try {
    await fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

const mail = defineJob<{ to: string; subject?: string; tags?: string[] }>({
  kind: 'send_email',
  queue: 'mail',
});
const audit = defineJob<{ action: string }>({ kind: 'audit', queue: 'audit' });

describe('createTestSchema', () => {
  it('creates a migrated schema of its own with a client bound to it, and drop() removes that schema only', async () => {
    const before = await testSchemas();
    const a = await createTestSchema({ connectionString: db.url });
    const b = await createTestSchema({ connectionString: db.url });
    try {
      expect(a.schema).toMatch(/^awa_test_[0-9a-f]{12}$/);
      expect(b.schema).not.toBe(a.schema);
      expect(a.connectionString).toBe(db.url);
      expect(a.client.schema.name).toBe(a.schema);
      await a.client.assertMigrated();
      const { id } = await a.client.enqueue(mail, { to: 'a@example.com' });
      expect((await a.client.getJob(id))?.state).toBe('available');
      expect(await b.client.getJob(id)).toBeNull();
      expect(await testSchemas()).toEqual([...before, a.schema, b.schema].sort());
      await a.drop();
      await a.drop();
      expect(await testSchemas()).toEqual([...before, b.schema].sort());
      expect(await b.client.counts()).toEqual([]);
    } finally {
      await a.drop();
      await b.drop();
    }
    expect(await testSchemas()).toEqual(before);
  });

  it('drops the schema at the end of an `await using` block', async () => {
    const before = await testSchemas();
    let name = '';
    {
      await using t = await createTestSchema({ connectionString: db.url });
      name = t.schema;
      expect(await testSchemas()).toContain(name);
    }
    expect(await testSchemas()).toEqual(before);
  });

  it('takes DATABASE_URL by default, and says so when there is none', async () => {
    vi.stubEnv('DATABASE_URL', db.url);
    try {
      const t = await createTestSchema();
      expect(t.connectionString).toBe(db.url);
      await t.drop();
      vi.stubEnv('DATABASE_URL', '');
      const err = await rejection(() => createTestSchema());
      expect(err).toBeInstanceOf(InvalidOptionError);
      expect(err.message).toBe(
        'Invalid option "connectionString": is required: pass the PostgreSQL server to create test schemas on, or set DATABASE_URL',
      );
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('fails with a typed ConnectionError naming the server when it cannot be reached', async () => {
    const err = await rejection(() =>
      createTestSchema({ connectionString: 'postgres://postgres:secret@127.0.0.1:1/postgres' }),
    );
    expect(err).toBeInstanceOf(ConnectionError);
    expect((err as ConnectionError).code).toBe('AWA_CONNECTION_FAILED');
    expect(err.message).toMatch(
      /^Cannot connect to PostgreSQL at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/postgres: .*ECONNREFUSED.* Check DATABASE_URL/,
    );
  });

  it('useTestSchema() creates a schema in the setup hook and drops it in the teardown hook', async () => {
    const hooks: { setup?: () => Promise<void>; teardown?: () => Promise<void> } = {};
    const schema = useTestSchema(
      { setup: (fn) => (hooks.setup = fn), teardown: (fn) => (hooks.teardown = fn) },
      { connectionString: db.url },
    );
    expect(() => schema()).toThrow(/no test schema is set up here/);
    const before = await testSchemas();
    await hooks.setup!();
    const t = schema();
    expect(t).toBeInstanceOf(TestSchema);
    expect(await testSchemas()).toEqual([...before, t.schema].sort());
    await hooks.teardown!();
    expect(await testSchemas()).toEqual(before);
    expect(() => schema()).toThrow(/no test schema is set up here/);
  });
});

describe('expectEnqueued and expectNotEnqueued', () => {
  let t: TestSchema;
  beforeEach(async () => {
    t = await createTestSchema({ connectionString: db.url });
  });
  afterEach(() => t.drop());

  it('find committed jobs by kind, partial args, queue, priority and schedule, and return them oldest first', async () => {
    const first = await t.client.enqueue(mail, { to: 'a@example.com', subject: 'Hi', tags: ['x', 'y'] });
    const second = await t.client.enqueue(mail, { to: 'b@example.com', subject: 'Hi' }, { priority: 1 });
    const runAt = new Date('2100-01-01T00:00:00.000Z');
    const later = await t.client.enqueue(mail, { to: 'c@example.com' }, { runAt, queue: 'bulk' });
    const ids = (jobs: { id: string }[]) => jobs.map((j) => j.id);

    expect(ids(await expectEnqueued(t, mail))).toEqual([first.id, second.id, later.id]);
    expect(ids(await expectEnqueued(t.client, mail))).toEqual([first.id, second.id, later.id]);
    expect(ids(await expectEnqueued(t, 'send_email', { args: { subject: 'Hi' } }))).toEqual([
      first.id,
      second.id,
    ]);
    expect(ids(await expectEnqueued(t, mail, { args: { to: 'b@example.com' }, priority: 1 }))).toEqual([
      second.id,
    ]);
    expect(ids(await expectEnqueued(t, mail, { args: { tags: ['x', 'y'] } }))).toEqual([first.id]);
    expect(ids(await expectEnqueued(t, mail, { scheduled: runAt, queue: 'bulk' }))).toEqual([later.id]);
    expect(ids(await expectEnqueued(t, mail, { scheduled: false, count: 2 }))).toEqual([first.id, second.id]);
    expect(ids(await expectEnqueued(t, mail, { args: { to: expect.stringMatching(/^c@/) } }))).toEqual([
      later.id,
    ]);
    expect(ids(await expectEnqueued(t, mail, { args: { to: (v) => v === 'a@example.com' } }))).toEqual([
      first.id,
    ]);
    const [job] = await expectEnqueued(t, mail, { args: { to: 'c@example.com' } });
    expect(job).toMatchObject({ kind: 'send_email', queue: 'bulk', state: 'scheduled', runAt, attempt: 0 });
    await expectNotEnqueued(t, audit);
    await expectNotEnqueued(t, mail, { args: { to: 'nobody@example.com' } });
    await expectNotEnqueued(t, mail, { args: { tags: ['x'] } });
  });

  it('see what an open transaction enqueued on its own connection, and nothing once it rolls back', async () => {
    const tx = await t.client.pool.connect();
    try {
      await tx.query('begin');
      const { id } = await t.client.enqueue(mail, { to: 'tx@example.com' }, { client: tx });
      const inside = await expectEnqueued({ client: tx, schema: t.schema }, mail, {
        args: { to: 'tx@example.com' },
      });
      expect(inside.map((j) => [j.id, j.state])).toEqual([[id, 'available']]);
      // Nobody else sees it before commit.
      await expectNotEnqueued(t, mail);
      await tx.query('rollback');
      await expectNotEnqueued({ client: tx, schema: t.schema }, mail);
      await expectNotEnqueued(t, mail);

      await tx.query('begin');
      const { id: kept } = await t.client.enqueue(mail, { to: 'kept@example.com' }, { client: tx });
      await tx.query('commit');
      expect((await expectEnqueued(t, mail)).map((j) => j.id)).toEqual([kept]);
    } finally {
      tx.release();
    }
  });

  it('say what was enqueued instead, field by field, when nothing matches', async () => {
    const a = await t.client.enqueue(mail, { to: 'a@example.com', subject: 'Hi' });
    const b = await t.client.enqueue(mail, { to: 'b@example.com' }, { queue: 'bulk' });
    const err = (await rejection(() =>
      expectEnqueued(t, mail, { args: { to: 'c@example.com', subject: 'Hi' }, queue: 'mail' }),
    )) as EnqueuedAssertionError;
    expect(err).toBeInstanceOf(EnqueuedAssertionError);
    expect(err.code).toBe('AWA_TEST_ASSERTION');
    expect(err.message).toBe(
      `expectEnqueued: expected a job of kind "send_email" with args {"to":"c@example.com","subject":"Hi"}, queue "mail" in test schema "${t.schema}", but none of the 2 jobs of that kind matches:\n` +
        `  job ${a.id} (available, queue "mail", priority 2) args {"to":"a@example.com","subject":"Hi"}\n` +
        `    args.to: expected "c@example.com", got "a@example.com"\n` +
        `  job ${b.id} (available, queue "bulk", priority 2) args {"to":"b@example.com"}\n` +
        `    queue: expected "mail", got "bulk"\n` +
        `    args.to: expected "c@example.com", got "b@example.com"\n` +
        `    args.subject: expected "Hi", got no such key`,
    );
    // The nearest job beside the match, for a runner's diff.
    expect(err.actual).toEqual({ args: { to: 'a@example.com', subject: 'Hi' }, queue: 'mail' });
    expect(err.expected).toEqual({ args: { to: 'c@example.com', subject: 'Hi' }, queue: 'mail' });
  });

  it('say which kinds were enqueued when none of the kind was, and that nothing was when nothing was', async () => {
    const empty = await rejection(() => expectEnqueued(t, mail));
    expect(empty.message).toBe(
      `expectEnqueued: expected a job of kind "send_email" in test schema "${t.schema}", but no job of that kind was enqueued. Nothing was enqueued there.`,
    );
    await t.client.enqueue(audit, { action: 'login' });
    await t.client.enqueue(audit, { action: 'logout' });
    const other = await rejection(() => expectEnqueued(t, mail, { args: { to: 'a@example.com' } }));
    expect(other.message).toBe(
      `expectEnqueued: expected a job of kind "send_email" with args {"to":"a@example.com"} in test schema "${t.schema}", but no job of that kind was enqueued. Enqueued there: 2 jobs of kind "audit".`,
    );
  });

  it('say how many matched when a count was asked for', async () => {
    const a = await t.client.enqueue(mail, { to: 'a@example.com' });
    const b = await t.client.enqueue(mail, { to: 'b@example.com' });
    const err = await rejection(() => expectEnqueued(t, mail, { args: { to: 'a@example.com' }, count: 2 }));
    expect(err.message).toBe(
      `expectEnqueued: expected exactly 2 jobs of kind "send_email" with args {"to":"a@example.com"} in test schema "${t.schema}", but 1 of the 2 jobs of that kind matches:\n` +
        `  job ${a.id} (available, queue "mail", priority 2) args {"to":"a@example.com"}\n` +
        `    matches\n` +
        `  job ${b.id} (available, queue "mail", priority 2) args {"to":"b@example.com"}\n` +
        `    args.to: expected "a@example.com", got "b@example.com"`,
    );
  });

  it('expectNotEnqueued lists the jobs it was told not to find', async () => {
    const runAt = new Date('2100-01-01T00:00:00.000Z');
    const a = await t.client.enqueue(mail, { to: 'a@example.com' }, { runAt });
    const err = (await rejection(() =>
      expectNotEnqueued(t, mail, { scheduled: true }),
    )) as EnqueuedAssertionError;
    expect(err).toBeInstanceOf(EnqueuedAssertionError);
    expect(err.operator).toBe('expectNotEnqueued');
    expect(err.message).toBe(
      `expectNotEnqueued: expected no job of kind "send_email" with scheduled true in test schema "${t.schema}", but 1 job matches:\n` +
        `  job ${a.id} (scheduled, queue "mail", priority 2, due 2100-01-01T00:00:00.000Z) args {"to":"a@example.com"}\n` +
        `    matches`,
    );
  });

  it('refuse a malformed match or target, and name a schema that is not migrated', async () => {
    const typo = await rejection(() => expectEnqueued(t, mail, { qeue: 'mail' } as never));
    expect(typo).toBeInstanceOf(InvalidOptionError);
    expect(typo.message).toMatch(/^Invalid option "match.qeue": is not a known option/);
    const count = await rejection(() => expectNotEnqueued(t, mail, { count: 1 } as never));
    expect(count.message).toMatch(/^Invalid option "match.count": is not a known option/);
    const target = await rejection(() => expectEnqueued({} as never, mail));
    expect(target.message).toBe(
      'Invalid option "target": must be a TestSchema, an AwaClient, a pg client or pool, or { client, schema }',
    );
    // A bare pool reads schema "awa", which this database does not have.
    const bare = await rejection(() => expectEnqueued(side, mail));
    expect((bare as { code?: string }).code).toBe('AWA_DATABASE_ERROR');
    expect(bare.message).toBe(
      'Reading the jobs enqueued in schema "awa" on the given connection (is Awa migrated there? A bare connection reads schema "awa": pass { client, schema } for another) failed: relation "awa.ready_entries" does not exist',
    );
  });
});

describe('runJob', () => {
  let t: TestSchema;
  beforeAll(async () => {
    t = await createTestSchema({ connectionString: db.url });
  });
  afterAll(() => t.drop());

  /** A handler that does what the job's args say, and records each job it saw. */
  const seen: Job<{ to: string }>[] = [];
  const act = async (job: Job<{ to: string; subject?: string }>, ctx: JobContext) => {
    seen.push(job);
    switch (job.args.to) {
      case 'flaky':
        if (job.attempt < 2) throw new Error('smtp down');
        return;
      case 'later':
        throw new RetryAfter(60_000);
      case 'poll':
        throw new Snooze(5_000);
      case 'bounce':
        throw new FailJob('mailbox does not exist');
      case 'unsubscribed':
        throw new CancelJob('unsubscribed');
      case 'approve':
        if (job.callback) return;
        await ctx.registerCallback({ timeoutMs: 60_000 });
        throw new WaitForCallback();
      case 'hang':
        // Never ends, even when its signal aborts.
        await new Promise(() => {});
        return;
    }
  };
  const handlers = [defineHandler(mail, act), defineHandler(audit, async () => {})];
  const outcome = (run: JobRun) => [run.outcome, run.job.state, run.job.attempt];

  it('completes a job through a real worker host and returns its record', async () => {
    seen.length = 0;
    const run = await runJob(handlers, mail, { to: 'a@example.com' }, { schema: t });
    expect(run).toMatchObject({
      outcome: 'completed',
      job: { kind: 'send_email', queue: 'mail', state: 'completed', attempt: 1 },
    });
    expect(seen.map((j) => [j.id, j.args, j.attempt, j.queue])).toEqual([
      [run.job.id, { to: 'a@example.com' }, 1, 'mail'],
    ]);
  });

  it('reports a retry with its run time and error, and runJobAgain runs the next attempt', async () => {
    const first = await runJob(handlers, mail, { to: 'flaky' }, { schema: t });
    expect(outcome(first)).toEqual(['retry', 'retryable', 1]);
    if (first.outcome !== 'retry') throw new Error('unreachable');
    expect(first.error).toMatchObject({ attempt: 1, error: 'smtp down', name: 'Error' });
    expect(first.runAt).toEqual(first.job.runAt);
    const second = await runJobAgain(handlers, first.job, { schema: t });
    expect(outcome(second)).toEqual(['completed', 'completed', 2]);
    expect(second.job.meta?.errors?.map((e) => [e.attempt, e.error])).toEqual([[1, 'smtp down']]);

    const later = await runJob(handlers, mail, { to: 'later' }, { schema: t });
    expect(outcome(later)).toEqual(['retry', 'retryable', 1]);
    expect(later.outcome === 'retry' && later.runAt.getTime() === later.job.runAt?.getTime()).toBe(true);
  });

  it('reports a snooze (no attempt spent), a failure, a cancel, and a failure into the DLQ', async () => {
    const snooze = await runJob(handlers, mail, { to: 'poll' }, { schema: t });
    expect(outcome(snooze)).toEqual(['snooze', 'scheduled', 0]);
    expect(snooze.outcome === 'snooze' && snooze.runAt.getTime() === snooze.job.runAt?.getTime()).toBe(true);

    const failed = await runJob(handlers, mail, { to: 'bounce' }, { schema: t });
    expect(outcome(failed)).toEqual(['failed', 'failed', 1]);
    expect(failed).toMatchObject({ error: { error: 'mailbox does not exist', name: 'FailJob', attempt: 1 } });

    const cancelled = await runJob(handlers, mail, { to: 'unsubscribed' }, { schema: t });
    expect(outcome(cancelled)).toEqual(['cancelled', 'cancelled', 1]);
    expect(cancelled).toMatchObject({ error: { error: 'unsubscribed', name: 'CancelJob' } });

    const last = await runJob(
      handlers,
      mail,
      { to: 'flaky' },
      { schema: t, enqueue: { maxAttempts: 1, queue: 'mail_dlq' }, dlq: true },
    );
    expect(outcome(last)).toEqual(['failed', 'dlq', 1]);
    expect(last).toMatchObject({ error: { error: 'smtp down' }, job: { queue: 'mail_dlq', maxAttempts: 1 } });
  });

  it('reports a parked job with its token; a callback through the client completes it, or resumes its handler', async () => {
    const parked = await runJob(handlers, mail, { to: 'approve' }, { schema: t });
    expect(outcome(parked)).toEqual(['parked', 'waiting_external', 1]);
    if (parked.outcome !== 'parked') throw new Error('unreachable');
    expect(parked.token).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(await t.client.completeExternal(parked.token, { approved: true })).toEqual({
      outcome: 'settled',
      jobId: parked.job.id,
    });
    expect(await t.client.getJob(parked.job.id)).toMatchObject({
      state: 'completed',
      meta: { result: { approved: true } },
    });

    const again = await runJob(handlers, mail, { to: 'approve' }, { schema: t });
    if (again.outcome !== 'parked') throw new Error(`parked, not ${again.outcome}`);
    const refused = await rejection(() => runJobAgain(handlers, again.job.id, { schema: t }));
    expect(refused).toBeInstanceOf(CannotRunJobError);
    expect(refused.message).toBe(
      `runJobAgain: job ${again.job.id} has nothing to run: it is parked until a callback for token ${again.token}: deliver one with client.resumeExternal(token) to run its handler again, or completeExternal/failExternal/retryExternal/cancelExternal to settle it`,
    );
    await t.client.resumeExternal(again.token, { approved: true });
    seen.length = 0;
    const resumed = await runJobAgain(handlers, again.job.id, { schema: t });
    expect(outcome(resumed)).toEqual(['completed', 'completed', 1]);
    expect(seen.map((j) => j.callback?.payload)).toEqual([{ approved: true }]);
  });

  it('runs only its own job: a job the handler enqueues into the same queue stays available', async () => {
    const chain = defineJob<{ step: number }>({ kind: 'chain', queue: 'chain' });
    const steps: number[] = [];
    const chained = defineHandler(chain, async (job) => {
      steps.push(job.args.step);
      await t.client.enqueue(chain, { step: job.args.step + 1 });
    });
    const run = await runJob(chained, chain, { step: 1 }, { schema: t });
    expect(run.outcome).toBe('completed');
    expect(steps).toEqual([1]);
    const [next] = await expectEnqueued(t, chain, { args: { step: 2 } });
    expect(next!.state).toBe('available');
    // And it refuses to run while that job waits in the queue, naming it.
    const busy = await rejection(() => runJob(chained, chain, { step: 9 }, { schema: t }));
    expect(busy).toBeInstanceOf(CannotRunJobError);
    expect((busy as CannotRunJobError).code).toBe('AWA_TEST_CANNOT_RUN');
    expect(busy.message).toBe(
      `runJob runs one job alone, but queue "chain" of test schema "${t.schema}" holds 1 other available and 0 running job(s) a claim could take first: run them with drainQueue(), or use a schema of the test's own`,
    );
  });

  it('refuses a kind no handler runs, and a job that has ended', async () => {
    const nobody = await rejection(() => runJob(handlers, 'nobody', {}, { schema: t }));
    expect(nobody).toBeInstanceOf(UnknownKindError);
    expect(nobody.message).toBe(
      'No handler is registered for job kind "nobody" (known: send_email, audit). Register it on a worker that serves this queue.',
    );
    const done = await runJob(handlers, audit, { action: 'x' }, { schema: t });
    const again = await rejection(() => runJobAgain(handlers, done.job.id, { schema: t }));
    expect(again.message).toBe(
      `runJobAgain: job ${done.job.id} has nothing to run: it ended as completed after 1 attempt(s); client.retryJob(id) makes an ended job runnable again`,
    );
  });

  it('gives up with JobRunTimeoutError when the attempt does not settle in time', async () => {
    const err = await rejection(() =>
      runJob(handlers, mail, { to: 'hang' }, { schema: t, enqueue: { queue: 'hang' }, timeoutMs: 2_000 }),
    );
    expect(err).toBeInstanceOf(JobRunTimeoutError);
    expect((err as JobRunTimeoutError).code).toBe('AWA_TEST_TIMEOUT');
    const id = (err as JobRunTimeoutError).jobId;
    expect(err.message).toMatch(
      new RegExp(
        `^runJob: job ${id} did not settle within 2000 ms; it is running \\(attempt 1\\)\\. A handler that never returns is aborted`,
      ),
    );
  });

  it('creates and drops a schema of its own when given none', async () => {
    const before = await testSchemas();
    const run = await runJob(handlers, audit, { action: 'own' }, { connectionString: db.url });
    expect(run).toMatchObject({ outcome: 'completed', job: { args: { action: 'own' }, state: 'completed' } });
    expect(await testSchemas()).toEqual(before);
  });
});

describe('drainQueue', () => {
  let t: TestSchema;
  beforeEach(async () => {
    t = await createTestSchema({ connectionString: db.url });
  });
  afterEach(() => t.drop());

  it('runs the queues until they are idle, in queue order, and counts the outcomes', async () => {
    const order: string[] = [];
    const handlers = [
      defineHandler(mail, async (job) => {
        order.push(job.args.to);
        if (job.args.to === 'bounce') throw new FailJob('no such mailbox');
      }),
      defineHandler(audit, async (job) => void order.push(job.args.action)),
    ];
    const ids = [
      (await t.client.enqueue(mail, { to: 'a' })).id,
      (await t.client.enqueue(mail, { to: 'bounce' })).id,
      (await t.client.enqueue(mail, { to: 'b' })).id,
    ];
    await t.client.enqueue(audit, { action: 'login' });
    const result = await drainQueue(t, handlers, { queues: ['mail'] });
    expect(result.outcomes).toEqual({
      completed: 2,
      retry: 0,
      snooze: 0,
      failed: 1,
      cancelled: 0,
      parked: 0,
      blocked: 0,
      handedBack: 0,
    });
    expect(result.settled.map((s) => [s.jobId, s.kind, s.outcome])).toEqual([
      [ids[0], 'send_email', 'completed'],
      [ids[1], 'send_email', 'failed'],
      [ids[2], 'send_email', 'completed'],
    ]);
    expect(order).toEqual(['a', 'bounce', 'b']);
    expect(result.left).toEqual({
      available: 0,
      running: 0,
      scheduled: 0,
      retryable: 0,
      waiting: 0,
      dlq: 0,
      nextDueInMs: null,
    });
    expect(result.advancedMs).toBe(0);
    // The audit queue was not drained: its job waits.
    await expectEnqueued(t, audit, { args: { action: 'login' } }).then(([j]) =>
      expect(j!.state).toBe('available'),
    );
  });

  it('leaves retries and scheduled jobs that are not due, and runs them once the test clock reaches them', async () => {
    let attempts = 0;
    const handlers = defineHandler(mail, async (job) => {
      attempts++;
      if (job.args.to === 'later' && job.attempt === 1) throw new RetryAfter(60_000);
    });
    const retried = await t.client.enqueue(mail, { to: 'later' });
    const scheduled = await t.client.enqueue(mail, { to: 'tomorrow' }, { delayMs: 86_400_000 });
    const first = await drainQueue(t, handlers);
    expect(first.outcomes).toMatchObject({ retry: 1, completed: 0 });
    expect(first.left).toMatchObject({ scheduled: 1, retryable: 1, available: 0, running: 0 });
    expect(first.left.nextDueInMs).toBeGreaterThan(0);
    expect(first.left.nextDueInMs).toBeLessThanOrEqual(60_000);

    expect(await t.clock.advanceToNextDue({ atMostMs: 1_000 })).toBeNull();
    expect(await t.clock.advance(60_000)).toEqual({ deferred: 2, timeouts: 0 });
    const second = await drainQueue(t, handlers);
    expect(second.settled.map((s) => [s.jobId, s.outcome])).toEqual([[retried.id, 'completed']]);
    expect(second.left).toMatchObject({ scheduled: 1, retryable: 0 });
    expect((await t.client.getJob(retried.id))?.attempt).toBe(2);

    await t.clock.advance(86_400_000 - 60_000);
    expect(t.clock.advancedMs).toBe(86_400_000);
    const third = await drainQueue(t, handlers);
    expect(third.settled.map((s) => [s.jobId, s.outcome])).toEqual([[scheduled.id, 'completed']]);
    expect(third.left).toEqual({
      available: 0,
      running: 0,
      scheduled: 0,
      retryable: 0,
      waiting: 0,
      dlq: 0,
      nextDueInMs: null,
    });
    expect(attempts).toBe(3);
  });

  it('advances the clock itself within advanceUpToMs: backoff retries run to the end, callback timeouts expire', async () => {
    const flaky = defineHandler(mail, async (job, ctx) => {
      if (job.args.to === 'flaky' && job.attempt < 3) throw new Error(`attempt ${job.attempt} failed`);
      if (job.args.to === 'approve' && job.attempt === 1) {
        await ctx.registerCallback({ timeoutMs: 600_000 });
        throw new WaitForCallback();
      }
    });
    const a = await t.client.enqueue(mail, { to: 'flaky' });
    const b = await t.client.enqueue(mail, { to: 'approve' });
    const result = await drainQueue(t, flaky, { advanceUpToMs: 7 * 86_400_000 });
    expect(result.outcomes).toEqual({
      completed: 2,
      retry: 3,
      snooze: 0,
      failed: 0,
      cancelled: 0,
      parked: 1,
      blocked: 0,
      handedBack: 0,
    });
    expect(result.advancedMs).toBeGreaterThan(600_000);
    expect(result.left).toEqual({
      available: 0,
      running: 0,
      scheduled: 0,
      retryable: 0,
      waiting: 0,
      dlq: 0,
      nextDueInMs: null,
    });
    expect((await t.client.getJob(a.id))?.attempt).toBe(3);
    const approved = await t.client.getJob(b.id);
    expect(approved?.attempt).toBe(2);
    expect(approved?.meta?.errors?.map((e) => e.error)).toEqual(['callback timed out']);
  });

  it('hands back a job no handler runs, and reports it', async () => {
    const stray = await t.client.enqueue('stray_kind', { x: 1 }, { queue: 'mail' });
    const result = await drainQueue(
      t,
      defineHandler(mail, async () => {}),
    );
    expect(result.settled.map((s) => [s.jobId, s.kind, s.outcome])).toEqual([
      [stray.id, 'stray_kind', 'handedBack'],
    ]);
    expect(result.outcomes.handedBack).toBe(1);
    expect(result.left.scheduled).toBe(1);
  });

  it('stops at maxSettlements with DrainIncompleteError, saying what is left', async () => {
    const ever = defineHandler(mail, async () => {
      throw new Snooze(0);
    });
    const { id } = await t.client.enqueue(mail, { to: 'again' });
    const err = (await rejection(() => drainQueue(t, ever, { maxSettlements: 3 }))) as DrainIncompleteError;
    expect(err).toBeInstanceOf(DrainIncompleteError);
    expect(err.code).toBe('AWA_TEST_NOT_DRAINED');
    expect(err.result.outcomes.snooze).toBeGreaterThanOrEqual(3);
    expect(err.result.settled.every((s) => s.jobId === id && s.outcome === 'snooze')).toBe(true);
    const l = err.result.left;
    expect(l.available + l.scheduled).toBe(1);
    expect(err.message).toMatch(
      new RegExp(
        `^drainQueue: queue\\(s\\) "mail" of test schema "${t.schema}" were not idle after 3 settlements \\(maxSettlements\\): ` +
          `${l.available} available, 0 running, ${l.scheduled} scheduled, 0 retryable, 0 waiting for a callback left\\. The last settlements:\\n  job ${id} \\(send_email\\): snooze`,
      ),
    );
  });

  it('refuses options it does not know, and a clock step out of range', async () => {
    const h = defineHandler(mail, async () => {});
    const typo = await rejection(() => drainQueue(t, h, { advanceUptoMs: 1 } as never));
    expect(typo.message).toMatch(/^Invalid option "options.advanceUptoMs": is not a known option/);
    const step = await rejection(() => t.clock.advance(-1));
    expect(step.message).toMatch(/^Invalid option "ms": must be an integer from 0 to/);
  });
});

describe('under node:test', () => {
  it('a node:test file using the helpers passes when run with `node --test`', async () => {
    const file = fileURLToPath(new URL('../fixtures/node-test-example.ts', import.meta.url));
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', '--test', '--test-reporter=tap', file],
      { env: { ...process.env, DATABASE_URL: db.url }, timeout: 120_000 },
    );
    expect(stdout).toMatch(/^# tests 4$/m);
    expect(stdout).toMatch(/^# pass 4$/m);
    expect(stdout).toMatch(/^# fail 0$/m);
    expect(stdout).not.toMatch(/^# skipped [1-9]/m);
  });
});
