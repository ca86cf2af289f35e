import { spawn } from 'node:child_process';
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AwaClient,
  defineJob,
  type EnqueueOptions,
  InvalidOptionError,
  type JobRecord,
  PayloadTooLargeError,
  WorkerHost,
} from '../../src/index.js';
import { canonicalJson } from '../../src/model/unique.js';
import { expectEnqueued, expectNotEnqueued } from '../../src/testing/index.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// The SQL producer, insert_job() and insert_jobs() (docs/sql.md), against a real database: a trigger enqueues
// in the application's transaction; psql enqueues a job a worker host runs; a job from SQL reads exactly as
// the same job from TypeScript, and unique jobs from either side deduplicate against the other, down to the
// canonical JSON of their args (checked against the TypeScript function on generated JSON too); scheduling,
// options and the bulk form's order; and every bad input is refused with its documented SQLSTATE, naming its
// field, with nothing inserted, where the TypeScript producer refuses the same input.

let db: TestDatabase;
let client: AwaClient;
let pool: pg.Pool;
const hosts: WorkerHost[] = [];

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('sql_producer'));
  pool = sidePool(db.url, 4);
});
afterEach(() => stopHosts(hosts));
afterAll(async () => {
  await pool?.end();
  await closeDatabase(client, db);
});

interface Inserted {
  id: string;
  inserted: boolean;
}

/** insert_job() with args and opts as JSON text, so numbers reach PostgreSQL as written (1.50, 1e21). */
async function insertJob(kind: string | null, args: string | null, opts?: string | null): Promise<Inserted> {
  const { rows } = await pool.query<Inserted>(
    opts === undefined
      ? 'select job_id::text as id, inserted from awa.insert_job($1, $2::jsonb)'
      : 'select job_id::text as id, inserted from awa.insert_job($1, $2::jsonb, $3::jsonb)',
    opts === undefined ? [kind, args] : [kind, args, opts],
  );
  expect(rows).toHaveLength(1);
  return rows[0]!;
}

async function insertJobs(jobs: string | null): Promise<Inserted[]> {
  const { rows } = await pool.query<Inserted>(
    'select job_id::text as id, inserted from awa.insert_jobs($1::jsonb)',
    [jobs],
  );
  return rows;
}

/** The options of a TypeScript enqueue as insert_job() takes them: a Date as its ISO text. */
const sqlOpts = (o: EnqueueOptions): string =>
  JSON.stringify({ ...o, ...(o.runAt ? { runAt: o.runAt.toISOString() } : {}) });

/** What a job is, without what differs between any two jobs (id, when it was enqueued). */
function body(job: JobRecord | null, keepRunAt: boolean): Record<string, unknown> {
  expect(job).not.toBeNull();
  const { id: _id, runAt, finishedAt: _f, claim: _c, ...rest } = job!;
  return keepRunAt ? { ...rest, runAt } : rest;
}

async function jobsInDatabase(): Promise<number> {
  const counts = await client.counts();
  return counts.reduce((n, c) => n + c.available + c.scheduled + c.running + c.retryable, 0);
}

interface SqlError {
  code: string;
  column: string | undefined;
  message: string;
  hint: string | undefined;
}

async function sqlError(run: () => Promise<unknown>): Promise<SqlError> {
  try {
    await run();
  } catch (err) {
    const e = err as SqlError;
    return { code: e.code, column: e.column, message: e.message, hint: e.hint };
  }
  throw new Error('expected the call to be refused');
}

describe('enqueue in the caller’s transaction', () => {
  beforeAll(async () => {
    await pool.query(`
      create table orders (id bigint generated always as identity primary key, email text not null, job_id bigint);
      create function orders_enqueue() returns trigger language plpgsql as $$
      begin
        select j.job_id into new.job_id
          from awa.insert_job('order_placed', jsonb_build_object('order', new.id, 'email', new.email),
                              '{"queue": "orders", "priority": 1}') j;
        return new;
      end $$;
      create trigger orders_enqueue before insert on orders for each row execute function orders_enqueue();`);
  });

  const placeOrder = async (c: pg.PoolClient, email: string) =>
    (
      await c.query<{ id: string; job_id: string }>(
        'insert into orders (email) values ($1) returning id::text, job_id::text',
        [email],
      )
    ).rows[0]!;

  it('a trigger’s job exists once the order commits', async () => {
    const c = await pool.connect();
    try {
      await c.query('begin');
      const order = await placeOrder(c, 'a@example.com');
      // Our test helpers (awa-node/testing): in the order's transaction the job is there…
      const [mine] = await expectEnqueued(c, 'order_placed', {
        args: { order: Number(order.id), email: 'a@example.com' },
        queue: 'orders',
        priority: 1,
        count: 1,
      });
      expect(mine!.id).toBe(order.job_id);
      // …and to nobody else before the commit.
      await expectNotEnqueued(client, 'order_placed', { args: { email: 'a@example.com' } });
      expect(await client.getJob(order.job_id)).toBeNull();
      await c.query('commit');
      await expectEnqueued(client, 'order_placed', { args: { email: 'a@example.com' }, count: 1 });
      const job = await client.getJob(order.job_id);
      expect(job).toMatchObject({
        id: order.job_id,
        state: 'available',
        kind: 'order_placed',
        queue: 'orders',
        priority: 1,
        args: { order: Number(order.id), email: 'a@example.com' },
        attempt: 0,
        maxAttempts: 25,
        meta: null,
      });
    } finally {
      c.release();
    }
  });

  it('a rolled-back order leaves no job', async () => {
    const c = await pool.connect();
    let jobId: string;
    try {
      await c.query('begin');
      jobId = (await placeOrder(c, 'b@example.com')).job_id;
      await c.query('rollback');
    } finally {
      c.release();
    }
    expect(await client.getJob(jobId)).toBeNull();
    await expectNotEnqueued(client, 'order_placed', { args: { email: 'b@example.com' } });
    const listed = await client.listJobs({ state: 'available', queue: 'orders' });
    expect(listed.map((j) => j.id)).not.toContain(jobId);
  });
});

/** Runs psql against the test database; resolves with its exit code and output. */
function psql(sql: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn('psql', [db.url, '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c', sql], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    p.once('error', reject);
    p.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('from psql', () => {
  it('a job enqueued by psql is run by a worker host', async () => {
    const out = await psql(
      `select job_id from awa.insert_job('psql_report', '{"report": 7, "title": "Q3 ✓"}', '{"queue": "psql"}')`,
    );
    expect(out).toMatchObject({ code: 0, stderr: '' });
    const id = out.stdout.trim();
    expect(id).toMatch(/^\d+$/);

    const seen: unknown[] = [];
    const host = new WorkerHost({ connectionString: db.url, queues: { psql: 2 }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(defineJob({ kind: 'psql_report', queue: 'psql' }), (job) => {
      seen.push({ id: job.id, args: job.args });
    });
    hosts.push(host);
    await host.start();
    await until('the job completed', async () => (await client.getJob(id))?.state === 'completed');
    expect(seen).toEqual([{ id, args: { report: 7, title: 'Q3 ✓' } }]);
  });

  it('psql shows the refusal, its field and what to do', async () => {
    const out = await psql(`select * from awa.insert_job('psql_report', '{}', '{"priority": 9}')`);
    expect(out.code).toBe(1); // the statement failed
    expect(out.stderr).toContain(
      'ERROR:  awa.insert_job: opts.priority must be an integer from 1 to 4, got 9\nHINT:  Give 1 (most urgent), 2 (the default), 3 or 4.',
    );
  });
});

describe('a job from SQL is the job TypeScript enqueues', () => {
  const HOUR = 3_600_000;
  // A whole hour well in the future, so runAt and period buckets do not depend on when the test runs.
  const LATER = new Date(Math.ceil(Date.now() / HOUR) * HOUR + 48 * HOUR);

  // Args as JSON text: TypeScript gets JSON.parse of it, SQL the text itself, numbers as written.
  const ARGS: Record<string, string> = {
    plain: '{"user": 42, "email": "x@example.com"}',
    keyOrder: '{"b": 2, "a": 1, "B": 0, "aa": [], "10": "ten", "9": "nine"}',
    nested: '{"z": {"y": [3, {"d": 1, "c": [true, null, false]}], "x": {}}, "a": [[], [{"q": 1, "p": 2}]]}',
    unicode:
      '{"é": "ü", "日本": "語", "\\ud83d\\ude00": "astral", "\\ue000": "private use", "\\uffff": "last of the BMP", "\\u007f": "del", "q\\"\\\\": "tab\\tnewline\\n\\u0001", "z": "\\u2028"}',
    numbers:
      '{"n": [1.50, 1e21, 0.00001, 1e-7, 1.0, -0, 0.1, 1E+2, 100, 1e20, 123456789012345678901234567890, 12345678.90, 2.5e-7, -1.5e-10, 5e-324, 1.7976931348623157e308, 9007199254740993]}',
    scalar: '"just a string"',
    array: '[3, 1, 2]',
  };

  it.each(Object.entries(ARGS))('%s args, no options: the same job', async (_, text) => {
    const ts = await client.enqueue('parity', JSON.parse(text));
    const sql = await insertJob('parity', text);
    expect(sql.inserted).toBe(true);
    expect(body(await client.getJob(sql.id), true)).toEqual(body(await client.getJob(ts.id), true));
    expect((await client.getJob(sql.id))?.meta).toBeNull();
  });

  const OPTIONS: [string, EnqueueOptions][] = [
    ['queue, priority, attempts', { queue: 'parity_q', priority: 4, maxAttempts: 3 }],
    [
      'metadata and tags',
      { metadata: { trace: 'r-1', nested: { n: 1.5, list: [1, 'a'] } }, tags: ['a', 'b'] },
    ],
    ['runAt in the future', { runAt: LATER, priority: 1 }],
    ['runAt in the past', { runAt: new Date(Date.now() - HOUR), queue: 'parity_q' }],
    ['delayMs 0', { delayMs: 0 }],
    ['unique false', { unique: false, tags: ['t'] }],
  ];

  it.each(OPTIONS)('%s: the same job', async (_, options) => {
    const args = { order: 7, lines: [{ sku: 'a', qty: 2 }] };
    const ts = await client.enqueue('parity_opts', args, options);
    const sql = await insertJob('parity_opts', JSON.stringify(args), sqlOpts(options));
    expect(sql.inserted).toBe(true);
    const [a, b] = [await client.getJob(ts.id), await client.getJob(sql.id)];
    expect(b!.state).toBe(options.runAt && options.runAt > new Date() ? 'scheduled' : 'available');
    expect(body(b, options.runAt !== undefined && b!.state === 'scheduled')).toEqual(
      body(a, options.runAt !== undefined && a!.state === 'scheduled'),
    );
  });

  it('delayMs: scheduled that far from the call', async () => {
    const clock = async () =>
      Number(
        (await pool.query<{ ms: string }>(`select floor(extract(epoch from clock_timestamp()) * 1000) as ms`))
          .rows[0]!.ms,
      );
    const before = await clock();
    const { id } = await insertJob('delayed', '{}', '{"delayMs": 600000}');
    const after = await clock();
    const job = await client.getJob(id);
    expect(job?.state).toBe('scheduled');
    expect(job!.runAt!.getTime()).toBeGreaterThanOrEqual(before + 600_000);
    expect(job!.runAt!.getTime()).toBeLessThanOrEqual(after + 600_000);
  });

  // Each case: the SQL job takes the key first (TypeScript is told it is a duplicate), is cancelled, then
  // TypeScript takes the key (SQL is told it is a duplicate); the two holders are compared field by field.
  const UNIQUE: [string, string, EnqueueOptions][] = [
    ...Object.entries(ARGS).map(([name, text]): [string, string, EnqueueOptions] => [
      `by args (${name})`,
      text,
      { unique: true },
    ]),
    ['by args, in a queue of its own', ARGS.keyOrder!, { unique: true, queue: 'uq_other' }],
    ['a key of its own', '{"x": 1}', { unique: { key: 'report:42:ü' } }],
    [
      'states that keep blocking',
      '{"x": 2}',
      { unique: { states: ['completed', 'running', 'dlq', 'completed'] }, metadata: { m: 1 }, tags: ['u'] },
    ],
    ['a period of the run time', '{"x": 3}', { unique: { key: 'hourly', periodMs: HOUR }, runAt: LATER }],
    ['a period of now', ARGS.numbers!, { unique: { periodMs: 366 * 86_400_000 } }],
  ];

  it.each(UNIQUE)('unique %s: either side deduplicates the other', async (_, text, options) => {
    const kind = `uq_${Math.random().toString(36).slice(2)}`;
    const args: unknown = JSON.parse(text);
    const fromSql = await insertJob(kind, text, sqlOpts(options));
    expect(fromSql.inserted).toBe(true);
    expect(await client.enqueue(kind, args, options)).toEqual({ id: fromSql.id, inserted: false });

    expect(await client.cancel(fromSql.id)).not.toBeNull();
    const fromTs = await client.enqueue(kind, args, options);
    expect(fromTs.inserted).toBe(true);
    expect(await insertJob(kind, text, sqlOpts(options))).toEqual({ id: fromTs.id, inserted: false });

    const [sqlJob, tsJob] = [await client.getJob(fromSql.id), await client.getJob(fromTs.id)];
    expect(sqlJob!.state).toBe('cancelled');
    const { errors: _e, ...sqlMeta } = sqlJob!.meta!; // the cancellation's record
    const hold = ({ state: _s, meta: _m, ...rest }: Record<string, unknown>) => rest;
    expect(sqlMeta).toEqual(tsJob!.meta);
    expect(hold(body(sqlJob, false))).toEqual(hold(body(tsJob, false)));
    expect(tsJob!.meta!.unique!.key).toMatch(/^[0-9a-f]{64}$/);
  });

  it('canonical JSON is what the TypeScript producer writes, for generated JSON', async () => {
    const num = fc.oneof(
      fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
      fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => d.toExponential()),
      fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => d.toPrecision(21)),
      fc.tuple(fc.integer(), fc.nat(4)).map(([m, z]) => `${m}.5${'0'.repeat(z)}`),
      fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }).map(String),
    );
    const str = fc
      .string({ unit: 'binary', maxLength: 6 })
      .filter((s) => s.isWellFormed() && !s.includes('\u0000'));
    const key = fc.oneof(
      str,
      fc
        .array(fc.constantFrom('a', 'B', 'é', '\ue000', '\uffff', '😀', '\u{10ffff}', '日', '\u0001', '9'), {
          maxLength: 3,
        })
        .map((cs) => cs.join('')),
    );
    const { value } = fc.letrec<{ value: string; array: string; object: string }>((tie) => ({
      value: fc.oneof(
        { depthSize: 'small' },
        num,
        str.map((s) => JSON.stringify(s)),
        fc.constantFrom('true', 'false', 'null'),
        tie('array'),
        tie('object'),
      ),
      array: fc.array(tie('value'), { maxLength: 4 }).map((xs) => `[${xs.join(', ')}]`),
      object: fc
        .array(fc.tuple(key, tie('value')), { maxLength: 5 })
        .map((kvs) => `{${kvs.map(([k, v]) => `${JSON.stringify(k)}: ${v}`).join(', ')}}`),
    }));
    await fc.assert(
      fc.asyncProperty(fc.array(value, { minLength: 40, maxLength: 40 }), async (texts) => {
        const { rows } = await pool.query<{ c: string }>(
          'select awa.canonical_json(t::jsonb) as c from unnest($1::text[]) with ordinality u(t, i) order by i',
          [texts],
        );
        expect(rows.map((r) => r.c)).toEqual(texts.map((t) => canonicalJson(JSON.parse(t))));
      }),
      { numRuns: 25 },
    );
  });
});

describe('insert_job options and insert_jobs', () => {
  it('defaults are those of a kind the TypeScript producer has no definition of', async () => {
    const { id } = await insertJob('defaults', '{}', null); // SQL NULL opts: none, as undefined is in TypeScript
    expect(await client.getJob(id)).toMatchObject({
      state: 'available',
      kind: 'defaults',
      queue: 'default',
      priority: 2,
      maxAttempts: 25,
      args: {},
      meta: null,
    });
    const two = await pool.query<{ job_id: string }>(`select job_id::text from awa.insert_job('defaults')`);
    expect((await client.getJob(two.rows[0]!.job_id))?.args).toEqual({});
  });

  it('numbers and lengths are read as JavaScript reads them', async () => {
    // 2.0000000000000001 is the double 2; 1e3 is 1000. A kind of 150 two-byte letters is 300 bytes but 150
    // UTF-16 code units, so it is accepted, as TypeScript accepts it.
    const kind = 'é'.repeat(150);
    const { id } = await insertJob(kind, '{}', '{"priority": 2.0000000000000001, "maxAttempts": 1e3}');
    expect(await client.getJob(id)).toMatchObject({ kind, priority: 2, maxAttempts: 1000 });
    const ts = await client.enqueue(
      kind,
      {},
      JSON.parse('{"priority": 2.0000000000000001, "maxAttempts": 1e3}'),
    );
    expect(body(await client.getJob(ts.id), true)).toEqual(body(await client.getJob(id), true));
  });

  it('runAt in the future is scheduled at that time; priority, queue and attempts are kept', async () => {
    const at = new Date(Date.now() + 86_400_000);
    const { id } = await insertJob(
      'scheduled_one',
      '{"n": 1}',
      JSON.stringify({ runAt: at.toISOString(), priority: 3, queue: 'later', maxAttempts: 1000 }),
    );
    expect(await client.getJob(id)).toMatchObject({
      state: 'scheduled',
      runAt: at,
      priority: 3,
      queue: 'later',
      maxAttempts: 1000,
    });
    const local = await insertJob(
      'scheduled_one',
      '{"n": 2}',
      '{"runAt": "2999-06-01T12:00:00.123456+02:00"}',
    );
    expect((await client.getJob(local.id))?.runAt).toEqual(new Date('2999-06-01T10:00:00.123Z'));
  });

  // A speed property no test can time: PL/pgSQL sets up each expression once per transaction, and a SQL helper
  // the planner does not inline (one that calls a function less immutable than itself, say) is a call planned
  // again every time. Only the PL/pgSQL functions named here may be left as calls.
  it('the checks insert_job() runs on every call are inlined into it', async () => {
    const c = await pool.connect();
    try {
      await c.query('create temp table probe (k text, x jsonb)');
      const { rows } = await c.query<{ 'QUERY PLAN': string }>(
        `explain (verbose) select awa.plain_job(k, x, x), awa.opt_queue(x), awa.opt_priority(x),
                awa.opt_max_attempts(x), awa.name_problem(k), awa.js_int(x, 1, 4), awa.canonical_json_scalar(x),
                awa.utf16_sort_key(k) from probe`,
      );
      const calls = rows.flatMap((r) => [...r['QUERY PLAN'].matchAll(/awa\.(\w+)\(/g)].map((m) => m[1]));
      expect(new Set(calls)).toEqual(new Set(['js_int_exact', 'js_number_text', 'utf16_remap']));
    } finally {
      await c.query('drop table if exists probe');
      c.release();
    }
  });

  it('insert_jobs returns one row per job, in input order, duplicates included', async () => {
    const jobs = [
      { kind: 'bulk_a', args: { n: 0 } },
      { kind: 'bulk_b', args: { n: 1 }, opts: { queue: 'bulk_q', priority: 1 } },
      { kind: 'bulk_c', opts: { delayMs: 3_600_000 } },
      { kind: 'bulk_d', args: { n: 3 }, opts: { unique: true } },
      { kind: 'bulk_e', args: [4], opts: { priority: 4 } },
      { kind: 'bulk_d', args: { n: 3 }, opts: { unique: true } },
      { kind: 'bulk_a', args: { n: 6 }, opts: { priority: 3, tags: ['six'] } },
    ];
    const rows = await insertJobs(JSON.stringify(jobs));
    expect(rows.map((r) => r.inserted)).toEqual([true, true, true, true, true, false, true]);
    expect(rows[5]!.id).toBe(rows[3]!.id);
    expect(new Set(rows.map((r) => r.id)).size).toBe(6);
    const read = await Promise.all(rows.map((r) => client.getJob(r.id)));
    expect(read.map((j) => [j!.kind, j!.queue, j!.priority, j!.state])).toEqual([
      ['bulk_a', 'default', 2, 'available'],
      ['bulk_b', 'bulk_q', 1, 'available'],
      ['bulk_c', 'default', 2, 'scheduled'],
      ['bulk_d', 'default', 2, 'available'],
      ['bulk_e', 'default', 4, 'available'],
      ['bulk_d', 'default', 2, 'available'],
      ['bulk_a', 'default', 3, 'available'],
    ]);
    expect(read[2]!.args).toEqual({});
    expect(read[6]!.meta).toEqual({ tags: ['six'] });
    expect(await insertJobs('[]')).toEqual([]);
  });
});

describe('bad input is refused with its SQLSTATE and field, and nothing is inserted', () => {
  const long = (n: number) => 'x'.repeat(n);
  // [label, kind, args, opts, SQLSTATE, field, what TypeScript's producer refuses it with (class, field)]
  const CASES: [string, string | null, string | null, string, string, string, [unknown, string?]?][] = [
    [
      'an unknown option',
      'k',
      '{}',
      '{"prority": 1}',
      '22023',
      'opts.prority',
      [InvalidOptionError, 'options.prority'],
    ],
    ['priority 9', 'k', '{}', '{"priority": 9}', '22023', 'opts.priority', [InvalidOptionError, 'priority']],
    ['priority 0', 'k', '{}', '{"priority": 0}', '22023', 'opts.priority', [InvalidOptionError, 'priority']],
    [
      'priority 2.5',
      'k',
      '{}',
      '{"priority": 2.5}',
      '22023',
      'opts.priority',
      [InvalidOptionError, 'priority'],
    ],
    [
      'priority as text',
      'k',
      '{}',
      '{"priority": "1"}',
      '22023',
      'opts.priority',
      [InvalidOptionError, 'priority'],
    ],
    ['an empty queue', 'k', '{}', '{"queue": ""}', '22023', 'opts.queue', [InvalidOptionError, 'queue']],
    [
      'a queue of 201 characters',
      'k',
      '{}',
      `{"queue": "${long(201)}"}`,
      '22023',
      'opts.queue',
      [InvalidOptionError, 'queue'],
    ],
    [
      'a queue of 101 astral characters',
      'k',
      '{}',
      `{"queue": "${'😀'.repeat(101)}"}`,
      '22023',
      'opts.queue',
      [InvalidOptionError, 'queue'],
    ],
    [
      'a queue with a control character',
      'k',
      '{}',
      '{"queue": "a\\u0007b"}',
      '22023',
      'opts.queue',
      [InvalidOptionError, 'queue'],
    ],
    [
      'a queue that is a number',
      'k',
      '{}',
      '{"queue": 5}',
      '22023',
      'opts.queue',
      [InvalidOptionError, 'queue'],
    ],
    [
      'maxAttempts 0',
      'k',
      '{}',
      '{"maxAttempts": 0}',
      '22023',
      'opts.maxAttempts',
      [InvalidOptionError, 'maxAttempts'],
    ],
    [
      'maxAttempts 1001',
      'k',
      '{}',
      '{"maxAttempts": 1001}',
      '22023',
      'opts.maxAttempts',
      [InvalidOptionError, 'maxAttempts'],
    ],
    ['tags not an array', 'k', '{}', '{"tags": "a"}', '22023', 'opts.tags', [InvalidOptionError, 'tags']],
    [
      '21 tags',
      'k',
      '{}',
      JSON.stringify({ tags: Array.from({ length: 21 }, (_, i) => `t${i}`) }),
      '22023',
      'opts.tags',
      [InvalidOptionError, 'tags'],
    ],
    ['an empty tag', 'k', '{}', '{"tags": ["a", ""]}', '22023', 'opts.tags', [InvalidOptionError, 'tags']],
    [
      'a tag of 101 characters',
      'k',
      '{}',
      `{"tags": ["${long(101)}"]}`,
      '22023',
      'opts.tags',
      [InvalidOptionError, 'tags'],
    ],
    [
      'a tag that is a number',
      'k',
      '{}',
      '{"tags": [1]}',
      '22023',
      'opts.tags',
      [InvalidOptionError, 'tags'],
    ],
    [
      'metadata not an object',
      'k',
      '{}',
      '{"metadata": [1]}',
      '22023',
      'opts.metadata',
      [InvalidOptionError, 'metadata'],
    ],
    [
      'metadata over 64 KiB',
      'k',
      '{}',
      JSON.stringify({ metadata: { big: long(65_536) } }),
      '54000',
      'opts.metadata',
      [PayloadTooLargeError],
    ],
    ['opts not an object', 'k', '{}', '[]', '22023', 'opts'],
    [
      'runAt and delayMs',
      'k',
      '{}',
      '{"runAt": "2999-01-01T00:00:00Z", "delayMs": 5}',
      '22023',
      'opts.delayMs',
      [InvalidOptionError, 'delayMs'],
    ],
    ['runAt without a time zone', 'k', '{}', '{"runAt": "2999-01-01T00:00:00"}', '22023', 'opts.runAt'],
    [
      'runAt on a day that does not exist',
      'k',
      '{}',
      '{"runAt": "2999-02-30T00:00:00Z"}',
      '22023',
      'opts.runAt',
    ],
    ['runAt as words', 'k', '{}', '{"runAt": "tomorrow"}', '22023', 'opts.runAt'],
    [
      'runAt as a number',
      'k',
      '{}',
      '{"runAt": 1700000000000}',
      '22023',
      'opts.runAt',
      [InvalidOptionError, 'runAt'],
    ],
    [
      'delayMs below 0',
      'k',
      '{}',
      '{"delayMs": -1}',
      '22023',
      'opts.delayMs',
      [InvalidOptionError, 'delayMs'],
    ],
    ['delayMs 1.5', 'k', '{}', '{"delayMs": 1.5}', '22023', 'opts.delayMs', [InvalidOptionError, 'delayMs']],
    [
      'unique as text',
      'k',
      '{}',
      '{"unique": "yes"}',
      '22023',
      'opts.unique',
      [InvalidOptionError, 'unique'],
    ],
    [
      'an unknown unique option',
      'k',
      '{}',
      '{"unique": {"keys": "x"}}',
      '22023',
      'opts.unique.keys',
      [InvalidOptionError, 'unique.keys'],
    ],
    [
      'an empty unique key',
      'k',
      '{}',
      '{"unique": {"key": ""}}',
      '22023',
      'opts.unique.key',
      [InvalidOptionError, 'unique.key'],
    ],
    [
      'an unknown state',
      'k',
      '{}',
      '{"unique": {"states": ["running", "nope"]}}',
      '22023',
      'opts.unique.states',
      [InvalidOptionError, 'unique.states'],
    ],
    [
      'states not an array',
      'k',
      '{}',
      '{"unique": {"states": "completed"}}',
      '22023',
      'opts.unique.states',
      [InvalidOptionError, 'unique.states'],
    ],
    [
      'a period of 5 ms',
      'k',
      '{}',
      '{"unique": {"periodMs": 5}}',
      '22023',
      'opts.unique.periodMs',
      [InvalidOptionError, 'unique.periodMs'],
    ],
    [
      'args over 1 MiB',
      'k',
      JSON.stringify({ big: long(1_048_576) }),
      '{}',
      '54000',
      'args',
      [PayloadTooLargeError],
    ],
    ['args with a number beyond a double', 'k', '{"n": [1, 1e400]}', '{}', '22003', 'args'],
    ['args with a number below a double', 'k', '{"n": -1e-400}', '{}', '22003', 'args'],
    ['SQL NULL args', 'k', null, '{}', '22004', 'args'],
    ['SQL NULL kind', null, '{}', '{}', '22004', 'kind'],
    ['an empty kind', '', '{}', '{}', '22023', 'kind', [InvalidOptionError, 'kind']],
    ['a kind with a control character', 'a\nb', '{}', '{}', '22023', 'kind', [InvalidOptionError, 'kind']],
    [
      'a kind of 101 astral characters',
      '😀'.repeat(101),
      '{}',
      '{}',
      '22023',
      'kind',
      [InvalidOptionError, 'kind'],
    ],
  ];

  it.each(CASES)('%s', async (_, kind, args, opts, code, field, ts) => {
    const before = await jobsInDatabase();
    const err = await sqlError(() => insertJob(kind, args, opts));
    expect(err).toMatchObject({ code, column: field });
    expect(err.message).toMatch(new RegExp(`^awa\\.insert_job: ${field.replace(/\./g, '\\.')} \\S`));
    expect(err.hint).toMatch(/\w/);
    expect(await jobsInDatabase()).toBe(before);
    if (ts) {
      // The TypeScript producer refuses the same job (runAt as a Date, the one option JSON has no form of).
      const options = JSON.parse(opts) as Record<string, unknown>;
      const tsOptions =
        typeof options.runAt === 'string' ? { ...options, runAt: new Date(options.runAt) } : options;
      const tsErr = await client
        .enqueue(kind as string, JSON.parse(args!), tsOptions as EnqueueOptions)
        .catch((e: unknown) => e);
      expect(tsErr).toBeInstanceOf(ts[0] as typeof Error);
      if (ts[1]) expect((tsErr as InvalidOptionError).field).toBe(ts[1]);
    }
  });

  it('insert_jobs names the job and its field, and inserts none of the call’s jobs', async () => {
    const before = await jobsInDatabase();
    const good = { kind: 'ok', args: { n: 1 } };
    const cases: [string | null, string, string][] = [
      [JSON.stringify([good, good, { kind: 'ok', opts: { priority: 7 } }]), '22023', 'jobs[2].opts.priority'],
      [JSON.stringify([good, { kind: 'ok', options: {} }]), '22023', 'jobs[1].options'],
      [JSON.stringify([good, 'ok']), '22023', 'jobs[1]'],
      [JSON.stringify([{ args: {} }]), '22023', 'jobs[0].kind'],
      ['[{"kind": "ok"}, {"kind": "ok", "args": {"n": 1e400}}]', '22003', 'jobs[1].args'],
      [JSON.stringify({ jobs: [good] }), '22023', 'jobs'],
      [null, '22004', 'jobs'],
    ];
    for (const [jobs, code, field] of cases) {
      const err = await sqlError(() => insertJobs(jobs));
      expect(err, field).toMatchObject({ code, column: field });
      expect(err.message).toMatch(new RegExp(`^awa\\.insert_jobs: ${field.replace(/[.[\]]/g, '\\$&')} \\S`));
    }
    expect(await jobsInDatabase()).toBe(before);
  });
});
