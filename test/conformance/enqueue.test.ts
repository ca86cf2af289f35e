import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AwaClient,
  ClientClosedError,
  ConnectionError,
  defineJob,
  InvalidArgsError,
  InvalidOptionError,
  PayloadNotSerialisableError,
  PayloadTooLargeError,
} from '../../src/index.js';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { claimBatches } from '../helpers/claim.js';
import { STORAGE_VARIANTS } from './variants.js';

const email = defineJob({
  kind: 'send_email',
  queue: 'mail',
  schema: z.object({ to: z.string().email(), subject: z.string().min(1) }),
});

describe.each(STORAGE_VARIANTS)('enqueue ($name storage)', (variant) => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('enqueue', variant);
  });
  afterAll(async () => {
    await f.close();
  });

  it("joins the caller's transaction: commit makes the job visible, rollback makes it never exist", async () => {
    const conn = await f.pool.connect();
    try {
      await conn.query('begin');
      const kept = (await f.client.enqueue(email, { to: 'a@example.com', subject: 'hi' }, { client: conn }))
        .id;
      // Not visible to anyone else before commit.
      expect(await f.client.getJob(kept)).toBeNull();
      await conn.query('commit');
      await conn.query('begin');
      const dropped = (
        await f.client.enqueue(email, { to: 'b@example.com', subject: 'hi' }, { client: conn })
      ).id;
      await conn.query('rollback');
      expect((await f.client.getJob(kept))?.state).toBe('available');
      expect(await f.client.getJob(dropped)).toBeNull();
    } finally {
      conn.release();
    }
  });

  it('applies the kind defaults and per-job options', async () => {
    const id = (
      await f.client.enqueue(
        email,
        { to: 'c@example.com', subject: 's' },
        {
          priority: 1,
          maxAttempts: 7,
          metadata: { tenant: 't1' },
          tags: ['welcome'],
        },
      )
    ).id;
    const job = await f.client.getJob(id);
    expect(job).toMatchObject({
      state: 'available',
      kind: 'send_email',
      queue: 'mail',
      priority: 1,
      maxAttempts: 7,
      attempt: 0,
    });
    expect(job?.args).toEqual({ to: 'c@example.com', subject: 's' });
    expect(job?.meta).toEqual({ metadata: { tenant: 't1' }, tags: ['welcome'] });
  });

  it('puts a future runAt in the scheduled backlog', async () => {
    const runAt = new Date(Date.now() + 3_600_000);
    const id = (await f.client.enqueue('later', { x: 1 }, { runAt })).id;
    const job = await f.client.getJob(id);
    expect(job?.state).toBe('scheduled');
    expect(job?.runAt?.getTime()).toBe(runAt.getTime());
  });

  it('enqueueMany returns ids in input order across queues and priorities, atomically', async () => {
    const ids = (
      await f.client.enqueueMany([
        { kind: 'a', args: { i: 0 }, options: { queue: 'm1', priority: 3 } },
        { kind: 'b', args: { i: 1 }, options: { queue: 'm2' } },
        { kind: 'a', args: { i: 2 }, options: { queue: 'm1', priority: 1 } },
      ])
    ).map((r) => r.id);
    expect(ids).toHaveLength(3);
    const jobs = await Promise.all(ids.map((id) => f.client.getJob(id)));
    expect(jobs.map((j) => [j?.queue, j?.priority, (j?.args as { i: number }).i])).toEqual([
      ['m1', 3, 0],
      ['m2', 2, 1],
      ['m1', 1, 2],
    ]);
    // One invalid member rejects the whole call before anything is written.
    const before = await f.client.counts();
    await expect(
      f.client.enqueueMany([
        { kind: 'a', args: { ok: true }, options: { queue: 'm3' } },
        { kind: email, args: { to: 'not-an-email', subject: 'x' } },
      ]),
    ).rejects.toBeInstanceOf(InvalidArgsError);
    expect(await f.client.counts()).toEqual(before);
  });

  it('rejects invalid args with the schema path of the bad field', async () => {
    const err = await f.client.enqueue(email, { to: 'nope', subject: '' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgsError);
    expect((err as InvalidArgsError).code).toBe('AWA_INVALID_ARGS');
    expect((err as InvalidArgsError).issues.map((i) => i.path).sort()).toEqual(['subject', 'to']);
  });

  it('rejects bad options naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ priority: 5 }, 'priority'],
      [{ priority: 0 }, 'priority'],
      [{ maxAttempts: 0 }, 'maxAttempts'],
      [{ queue: '' }, 'queue'],
      [{ runAt: new Date('nope') }, 'runAt'],
      [{ tags: 'x' }, 'tags'],
      [{ metadata: [1] }, 'metadata'],
      [{ prority: 1 }, 'options.prority'],
    ];
    for (const [options, field] of cases) {
      const err = await f.client.enqueue('k', {}, options as never).catch((e: unknown) => e);
      expect(err, JSON.stringify(options)).toBeInstanceOf(InvalidOptionError);
      expect((err as InvalidOptionError).field).toBe(field);
    }
  });

  it('rejects payloads that are too large or not JSON, and stores nothing', async () => {
    const small = new AwaClient({ connectionString: f.url, maxPayloadBytes: 1024 });
    try {
      await expect(small.enqueue('big', { blob: 'é'.repeat(600) })).rejects.toBeInstanceOf(
        PayloadTooLargeError,
      );
      await expect(small.enqueue('big', { n: 10n })).rejects.toBeInstanceOf(PayloadNotSerialisableError);
      await expect(small.enqueue('big', { f: () => 1 })).rejects.toBeInstanceOf(PayloadNotSerialisableError);
      const circular: Record<string, unknown> = {};
      circular.self = circular;
      await expect(small.enqueue('big', circular)).rejects.toBeInstanceOf(PayloadNotSerialisableError);
      expect((await small.counts()).find((c) => c.queue === 'default')?.available ?? 0).toBe(0);
    } finally {
      await small.close();
    }
  });

  it('turns a wrong connection string into a typed error that says what to check', async () => {
    expect(() => new AwaClient({ connectionString: 'mysql://x' })).toThrow(InvalidOptionError);
    expect(() => new AwaClient({})).toThrow(InvalidOptionError);
    const dead = new AwaClient({ connectionString: 'postgres://postgres@127.0.0.1:1/none' });
    try {
      const err = await dead.enqueue('k', {}).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectionError);
      expect((err as ConnectionError).code).toBe('AWA_CONNECTION_FAILED');
      expect((err as Error).message).toContain('DATABASE_URL');
    } finally {
      await dead.close();
    }
  });

  it('close() is idempotent; every call after it, on its own pool or one passed in, fails with ClientClosedError', async () => {
    const own = new AwaClient({ connectionString: f.url });
    const pool = new pg.Pool({ connectionString: f.url, max: 2 });
    // pool.end() resolves before its sessions are gone; the database's drop may still terminate one.
    pool.on('error', () => {});
    const lent = new AwaClient({ pool });
    try {
      for (const c of [own, lent]) {
        expect((await c.enqueue('close_probe', {})).id).toMatch(/^\d+$/);
        await Promise.all([c.close(), c.close()]);
        await c.close();
        for (const call of [
          () => c.enqueue('close_probe', {}),
          () => c.getJob('1'),
          () => c.migrate(),
          () => c.copyEnqueue([{ kind: 'close_probe', args: {} }]),
        ]) {
          const err = await call().catch((e: unknown) => e);
          expect(err).toBeInstanceOf(ClientClosedError);
          expect((err as ClientClosedError).code).toBe('AWA_CLIENT_CLOSED');
          expect((err as Error).message).toContain('new AwaClient');
        }
      }
      // A pool passed in is the caller's: closing the client leaves it usable.
      expect((await pool.query('select 1 as one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
    }
  });

  it('a rolled-back enqueue leaves a lane gap that the next claim skips', async () => {
    const conn = new pg.Client(f.url);
    await conn.connect();
    await conn.query('begin');
    await f.client.enqueue('gap', { n: 1 }, { client: conn, queue: 'gapq' });
    await conn.query('rollback');
    await conn.end();
    const id = (await f.client.enqueue('gap', { n: 2 }, { queue: 'gapq' })).id;
    const batches = await claimBatches(f.storage, f.pool, {
      queue: 'gapq',
      max: 10,
      instanceId: 't',
      agingSeconds: 60,
      deadlineSeconds: 0,
    });
    expect(batches.flatMap((b) => b.jobs.map((j) => j.id))).toEqual([id]);
  });
});
