import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AwaClient,
  CancelJob,
  defineJob,
  FailJob,
  InvalidOptionError,
  Snooze,
  WaitForCallback,
  WorkerHost,
  type Job,
  type JobContext,
  type WorkerOptions,
} from '../../src/index.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// Unique jobs against a real database: keys given or derived from args (stable under key order), per-period
// keys, duplicates reported not raised, release and hold across every transition by the state mask, COPY
// with duplicates, and producers in several processes racing one key.

const FAST: Partial<WorkerOptions> = {
  pollIntervalMs: 20,
  promoteIntervalMs: 20,
  rescueIntervalMs: 50,
  leaderElectionIntervalMs: 50,
  heartbeatIntervalMs: 100,
  heartbeatStalenessMs: 1_000,
  shutdownTimeoutMs: 3_000,
};

let db: TestDatabase;
let client: AwaClient;
const hosts: WorkerHost[] = [];

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('unique'));
});
afterEach(() => stopHosts(hosts));
afterAll(() => closeDatabase(client, db));

const state = async (id: string) => (await client.getJob(id))?.state;

async function host(
  queue: string,
  kind: ReturnType<typeof defineJob<{ n: number }>>,
  handle: (job: Job<{ n: number }>, ctx: JobContext) => unknown,
  options: Partial<WorkerOptions> = {},
): Promise<WorkerHost> {
  const h = new WorkerHost({ connectionString: db.url, queues: { [queue]: 4 }, ...FAST, ...options });
  h.on('error', () => {});
  h.register(kind, handle);
  await h.start();
  hosts.push(h);
  return h;
}

describe('unique keys', () => {
  it('a duplicate by args is not inserted, whatever the order of the keys; enqueue reports the holder', async () => {
    const kind = defineJob<Record<string, unknown>>({ kind: 'u_args', queue: 'u_args', unique: true });
    const first = await client.enqueue(kind, { a: 1, b: { c: 2, d: [1, 2] } });
    expect(first.inserted).toBe(true);
    const dup = await client.enqueue(kind, { b: { d: [1, 2], c: 2 }, a: 1 });
    expect(dup).toEqual({ id: first.id, inserted: false });
    const other = await client.enqueue(kind, { a: 2 });
    expect(other.inserted).toBe(true);
    // Different queue, same args: another key.
    expect(
      (await client.enqueue(kind, { a: 1, b: { c: 2, d: [1, 2] } }, { queue: 'u_args_2' })).inserted,
    ).toBe(true);
    // A job of the kind can opt out.
    expect((await client.enqueue(kind, { a: 1, b: { c: 2, d: [1, 2] } }, { unique: false })).inserted).toBe(
      true,
    );
    const counts = (await client.counts()).find((c) => c.queue === 'u_args');
    expect(counts?.available).toBe(3);
  });

  it('a given key is scoped to the kind; a period makes one job per time bucket of its run time', async () => {
    const a = defineJob({ kind: 'u_key_a', queue: 'u_key' });
    const b = defineJob({ kind: 'u_key_b', queue: 'u_key' });
    const x = await client.enqueue(a, { any: 1 }, { unique: { key: 'report:42' } });
    expect((await client.enqueue(a, { any: 2 }, { unique: { key: 'report:42' } })).inserted).toBe(false);
    expect((await client.enqueue(b, { any: 1 }, { unique: { key: 'report:42' } })).inserted).toBe(true);
    expect(x.inserted).toBe(true);

    const hour = 3_600_000;
    const base = Math.ceil(Date.now() / hour) * hour + 5 * hour; // a whole hour in the future
    const at = (ms: number) => new Date(base + ms);
    const p = { unique: { key: 'hourly', periodMs: hour } };
    expect((await client.enqueue(a, {}, { ...p, runAt: at(0) })).inserted).toBe(true);
    expect((await client.enqueue(a, {}, { ...p, runAt: at(hour - 1) })).inserted).toBe(false);
    expect((await client.enqueue(a, {}, { ...p, runAt: at(hour) })).inserted).toBe(true);
  });

  it('validates the unique options, naming the field', async () => {
    const cases: [unknown, string][] = [
      [{ key: '' }, 'unique.key'],
      [{ states: ['running', 'nope'] }, 'unique.states'],
      [{ periodMs: 5 }, 'unique.periodMs'],
      [{ keys: 'x' }, 'unique.keys'],
    ];
    for (const [unique, field] of cases) {
      const err = await client.enqueue('k', {}, { unique: unique as never }).catch((e: unknown) => e);
      expect(err, JSON.stringify(unique)).toBeInstanceOf(InvalidOptionError);
      expect((err as InvalidOptionError).field).toBe(field);
    }
  });

  it('enqueueMany and copyEnqueue skip duplicates, within the batch and against held keys, and count them', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'u_bulk', queue: 'u_bulk', unique: true });
    const held = await client.enqueue(kind, { n: 1 });
    const many = await client.enqueueMany([1, 2, 2, 3].map((n) => ({ kind, args: { n } })));
    expect(many.map((r) => r.inserted)).toEqual([false, true, false, true]);
    expect(many[0]!.id).toBe(held.id);
    expect(many[2]!.id).toBe(many[1]!.id);

    const rows = Array.from({ length: 50 }, (_, i) => ({ kind, args: { n: i % 20 } }));
    const copied = await client.copyEnqueue(rows, { chunkSize: 7 });
    // n = 0..19 once each; 1, 2 and 3 were already held.
    expect(copied).toEqual({ inserted: 17, duplicates: 33 });
    expect((await client.counts()).find((c) => c.queue === 'u_bulk')?.available).toBe(20);
    // A mix of unique and plain rows: plain ones still go through COPY.
    const plain = defineJob<{ n: number }>({ kind: 'u_plain', queue: 'u_bulk' });
    expect(
      await client.copyEnqueue([
        { kind: plain, args: { n: 1 } },
        { kind, args: { n: 1 } },
        { kind: plain, args: { n: 1 } },
      ]),
    ).toEqual({ inserted: 2, duplicates: 1 });
  });

  it('the key is taken with the enqueue: a rolled-back transaction releases it', async () => {
    const kind = defineJob({ kind: 'u_tx', queue: 'u_tx' });
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      await c.query('begin');
      expect((await client.enqueue(kind, {}, { client: c, unique: { key: 'tx' } })).inserted).toBe(true);
      await c.query('rollback');
    } finally {
      await c.end();
    }
    expect((await client.enqueue(kind, {}, { unique: { key: 'tx' } })).inserted).toBe(true);
  });
});

describe('release and hold across transitions (default states: scheduled, available, running, retryable, waiting_external)', () => {
  const dupInserted = async (kind: { kind: string }, key: string) =>
    (await client.enqueue(kind.kind, {}, { unique: { key }, queue: `${kind.kind}_probe` })).inserted;

  it('completion releases; running and retryable hold; failure releases; with completed in the mask, completion holds', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'u_flow', queue: 'u_flow', maxAttempts: 2 });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    await host('u_flow', kind, async (job) => {
      if (job.args.n === 1) return gate;
      if (job.args.n === 2) throw new Error(`fails on attempt ${job.attempt}`);
    });
    const a = await client.enqueue(kind, { n: 1 }, { unique: { key: 'flow-a' } });
    await until('a running', async () => (await state(a.id)) === 'running');
    expect(await dupInserted(kind, 'flow-a')).toBe(false); // running holds
    release();
    await until('a completed', async () => (await state(a.id)) === 'completed');
    expect(await dupInserted(kind, 'flow-a')).toBe(true); // completed releases

    const b = await client.enqueue(kind, { n: 2 }, { unique: { key: 'flow-b' } });
    await until('b retryable', async () => (await state(b.id)) === 'retryable');
    expect(await dupInserted(kind, 'flow-b')).toBe(false); // retryable holds
    await until('b failed', async () => (await state(b.id)) === 'failed', 15_000);
    expect(await dupInserted(kind, 'flow-b')).toBe(true); // failed releases

    const sticky = await client.enqueue(kind, { n: 3 }, { unique: { key: 'flow-c', states: ['completed'] } });
    await until('c completed', async () => (await state(sticky.id)) === 'completed');
    expect(
      (await client.enqueue(kind.kind, {}, { unique: { key: 'flow-c', states: ['completed'] } })).inserted,
    ).toBe(false);
  });

  it('scheduled holds through promotion; snooze holds; cancel releases; parked (waiting_external) holds', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'u_sched', queue: 'u_sched' });
    const s = await client.enqueue(kind, { n: 1 }, { unique: { key: 'sched' }, delayMs: 300 });
    expect(await state(s.id)).toBe('scheduled');
    expect(await dupInserted(kind, 'sched')).toBe(false);
    let snoozed = false;
    let token = '';
    await host('u_sched', kind, async (job, ctx) => {
      if (job.args.n === 1 && !snoozed) {
        snoozed = true;
        throw new Snooze(300);
      }
      if (job.args.n === 2) {
        token = await ctx.registerCallback();
        throw new WaitForCallback();
      }
      if (job.args.n === 3) throw new CancelJob('no longer needed');
    });
    await until('promoted, run, snoozed', async () => snoozed && (await state(s.id)) === 'scheduled');
    expect(await dupInserted(kind, 'sched')).toBe(false);
    await until('completed after the snooze', async () => (await state(s.id)) === 'completed');

    const w = await client.enqueue(kind, { n: 2 }, { unique: { key: 'parked' } });
    await until('parked', async () => (await state(w.id)) === 'waiting_external');
    expect(await dupInserted(kind, 'parked')).toBe(false);
    await client.completeExternal(token);
    expect(await dupInserted(kind, 'parked')).toBe(true);

    const c = await client.enqueue(kind, { n: 3 }, { unique: { key: 'cancelled' } });
    await until('cancelled', async () => (await state(c.id)) === 'cancelled');
    expect(await dupInserted(kind, 'cancelled')).toBe(true);
  });

  it('dead-lettering releases; a DLQ retry takes the key back, or stays in the DLQ when another job holds it', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'u_dlq', queue: 'u_dlq', maxAttempts: 1 });
    await host(
      'u_dlq',
      kind,
      () => {
        throw new FailJob('broken');
      },
      { queues: { u_dlq: { concurrency: 2, dlq: true } } },
    );
    const a = await client.enqueue(kind, { n: 1 }, { unique: { key: 'dlq-a' } });
    const b = await client.enqueue(kind, { n: 2 }, { unique: { key: 'dlq-b' } });
    await until(
      'both dead-lettered',
      async () => (await state(a.id)) === 'dlq' && (await state(b.id)) === 'dlq',
    );
    await Promise.all(hosts.splice(0).map((h) => h.stop()));
    // dlq-a is taken by a new job meanwhile: retrying the old one must not make two holders.
    const taker = await client.enqueue(kind, { n: 3 }, { unique: { key: 'dlq-a' } });
    expect(taker.inserted).toBe(true);
    expect(await client.retryDlq([a.id, b.id])).toEqual([b.id]);
    expect(await state(a.id)).toBe('dlq');
    expect(await state(b.id)).toBe('available');
    expect(await dupInserted(kind, 'dlq-b')).toBe(false); // b holds its key again
  });

  it('rescue of a lost attempt keeps the key held (the job is retryable)', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'u_rescue', queue: 'u_rescue', maxAttempts: 2 });
    // A host that claims and then goes silent: its attempts are rescued by the leader.
    const silent = new WorkerHost({
      connectionString: db.url,
      queues: { u_rescue: 2 },
      ...FAST,
      maintenance: false,
      heartbeatIntervalMs: 60_000,
      heartbeatStalenessMs: 180_000,
    });
    silent.on('error', () => {});
    silent.register(kind, () => new Promise(() => {}));
    await silent.start();
    const j = await client.enqueue(kind, { n: 1 }, { unique: { key: 'rescued' } });
    await until('claimed by the silent host', async () => (await state(j.id)) === 'running');
    // Mark it stopped: the leader rescues its open receipts at once.
    await client.pool.query(`update awa.runtime_instances set stopped_at = now() where instance_id = $1`, [
      silent.config.instanceId,
    ]);
    const leader = new WorkerHost({ connectionString: db.url, queues: { u_rescue_other: 1 }, ...FAST });
    leader.on('error', () => {});
    await leader.start();
    hosts.push(leader);
    await until('rescued to retryable', async () => (await state(j.id)) === 'retryable');
    expect(await dupInserted(kind, 'rescued')).toBe(false);
    await silent.stop();
  });
});

describe('producers racing one key', () => {
  it('across several processes, each in its own open transaction, exactly one wins', async () => {
    const ROOT = fileURLToPath(new URL('../../', import.meta.url));
    const RACER = fileURLToPath(new URL('../fixtures/unique-racer.ts', import.meta.url));
    const run = (hold: number) =>
      new Promise<{ pid: number; id: string; inserted: boolean }>((resolve, reject) => {
        const child = spawn(process.execPath, ['--import', 'tsx', RACER, db.url, 'the-one', String(hold)], {
          cwd: ROOT,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        let err = '';
        child.stdout.on('data', (d: Buffer) => (out += d.toString()));
        child.stderr.on('data', (d: Buffer) => (err += d.toString()));
        child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(err))));
      });
    const results = await Promise.all([300, 250, 200, 150, 100, 50].map(run));
    const winners = results.filter((r) => r.inserted);
    expect(winners).toHaveLength(1);
    expect(results.every((r) => r.id === winners[0]!.id)).toBe(true);
    const { rows } = await client.pool.query(
      `select count(*)::int as n from awa.ready_entries where queue = 'race'`,
    );
    expect(rows[0].n).toBe(1);
  }, 60_000);
});
