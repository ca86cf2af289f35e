import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  createCallbackReceiver,
  defineJob,
  serveCallbacks,
  signatureHeader,
  WaitForCallback,
  WorkerHost,
  type JobRecord,
  type RunningServer,
  type WorkerOptions,
} from '../../src/index.js';
import { createTestDatabase } from '../helpers/database.js';
import { post, streamPost } from '../helpers/signed-post.js';
import { until } from '../helpers/wait.js';
import { fieldOf } from '../helpers/option-error.js';

// The signed HTTP callback receiver over real HTTP against a real database: every refused request (unsigned,
// badly signed, stale, replayed, oversized, malformed) leaves the job exactly as it was, and every accepted
// one reaches it through AwaClient as the action says.

const SECRET = 'receiver-secret-0123456789abcdef';
const OLD_SECRET = 'receiver-secret-old-0123456789ab';
const OTHER = 'somebody-else-secret-0123456789a';

const FAST: Partial<WorkerOptions> = {
  pollIntervalMs: 20,
  promoteIntervalMs: 20,
  leaderElectionIntervalMs: 50,
  shutdownTimeoutMs: 3_000,
};

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let client: AwaClient;
let server: RunningServer;
let url: string;
const hosts: WorkerHost[] = [];

beforeAll(async () => {
  db = await createTestDatabase('callback_receiver');
  client = new AwaClient({ connectionString: db.url });
  await client.migrate();
  server = await serveCallbacks({ client, secrets: [SECRET, OLD_SECRET], port: 0, maxBodyBytes: 64 * 1024 });
  url = `${server.url}/callbacks`;
});
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.stop()));
});
afterAll(async () => {
  await server?.close();
  await client?.close();
  await db?.drop();
});

type Args = { n: number };

/** Starts a host whose handler registers a callback and parks; returns the parked jobs' ids and tokens. */
async function parked(queue: string, count: number): Promise<{ id: string; token: string }[]> {
  const kind = defineJob<Args>({ kind: `${queue}_kind`, queue, maxAttempts: 5 });
  const tokens = new Map<number, string>();
  const h = new WorkerHost({ connectionString: db.url, queues: { [queue]: 4 }, ...FAST });
  h.on('error', () => {});
  h.register(kind, async (job, ctx) => {
    if (job.callback) return; // resumed: done
    tokens.set(job.args.n, await ctx.registerCallback());
    throw new WaitForCallback();
  });
  await h.start();
  hosts.push(h);
  const ids: string[] = [];
  for (let n = 0; n < count; n++) ids.push((await client.enqueue(kind, { n })).id);
  await until('all parked', async () =>
    (await Promise.all(ids.map((id) => client.getJob(id)))).every((j) => j?.state === 'waiting_external'),
  );
  return ids.map((id, n) => ({ id, token: tokens.get(n)! }));
}

/** The job as stored, less what moves on its own. */
const snapshot = async (id: string): Promise<JobRecord | null> => client.getJob(id);

describe('refused requests change nothing', () => {
  it('answers the same 401 to unsigned, badly signed, wrongly keyed, stale and future-dated callbacks', async () => {
    const [job] = await parked('rcv_refused', 1);
    const before = await snapshot(job!.id);
    const body = JSON.stringify({ token: job!.token, action: 'complete', payload: { ok: true } });
    const now = Math.floor(Date.now() / 1000);
    const refusals = {
      'no header': await post(url, body),
      'empty header': await post(url, body, { header: '' }),
      'malformed header': await post(url, body, { header: 'sha256=abc' }),
      'no v1': await post(url, body, { header: `t=${now}` }),
      'signature of another body': await post(url, body, {
        header: signatureHeader(SECRET, body.replace('true', 'false')),
      }),
      'wrong secret': await post(url, body, { secret: OTHER }),
      'timestamp 6 min old': await post(url, body, { secret: SECRET, timestamp: now - 360 }),
      'timestamp 6 min ahead': await post(url, body, { secret: SECRET, timestamp: now + 360 }),
      // Signed at another time than the header says: the timestamp is part of what is signed.
      'timestamp swapped': await post(url, body, {
        header: signatureHeader(SECRET, body, now - 10).replace(`t=${now - 10}`, `t=${now}`),
      }),
      'unknown token, no signature': await post(url, { token: randomUUID(), action: 'complete' }),
    };
    for (const [name, r] of Object.entries(refusals)) {
      expect({ name, status: r.status, text: r.text }).toEqual({
        name,
        status: 401,
        text: JSON.stringify({ error: 'unauthorized' }),
      });
    }
    // Identical answers: nothing tells a caller whether the token exists.
    expect(new Set(Object.values(refusals).map((r) => r.text + r.headers.get('content-type'))).size).toBe(1);
    expect(await snapshot(job!.id)).toEqual(before);
    expect(before?.state).toBe('waiting_external');
  });

  it('a replayed callback is authentic but its token is used: 409, and the job stays as the first one left it', async () => {
    const [job] = await parked('rcv_replay', 1);
    const body = JSON.stringify({ token: job!.token, action: 'complete', payload: { receipt: 'r-1' } });
    const header = signatureHeader(SECRET, body);
    const first = await post(url, body, { header });
    expect(first).toMatchObject({ status: 200, json: { outcome: 'settled', jobId: job!.id } });
    const settled = await snapshot(job!.id);
    expect(settled).toMatchObject({ state: 'completed', meta: { result: { receipt: 'r-1' } } });

    const replay = await post(url, body, { header });
    expect(replay).toMatchObject({ status: 409, json: { outcome: 'rejected' } });
    // Another action with the used token, freshly signed: the same.
    const other = await post(url, { token: job!.token, action: 'fail', error: 'late' }, { secret: SECRET });
    expect(other).toMatchObject({ status: 409, json: { outcome: 'rejected' } });
    expect(await snapshot(job!.id)).toEqual(settled);
  });

  it('refuses a body over maxBodyBytes with 413, which a client still sending can read', async () => {
    const [job] = await parked('rcv_large', 1);
    const before = await snapshot(job!.id);
    // A well-formed, fresh header: the size is checked before the HMAC (which needs the whole body).
    const header = signatureHeader(SECRET, 'x');
    // Node's fetch sending 10 MB: it reads the 413 every time (the rest of the body is read and dropped; an
    // answer sent while it was still writing reached it as EPIPE or a reset in 2-4 tries of 6).
    const tenMb = new Uint8Array(10 * 1024 * 1024).fill(0x61);
    for (let i = 0; i < 6; i++) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'Awa-Signature': header, 'Content-Type': 'application/json' },
        body: tenMb,
      });
      expect(res.status).toBe(413);
      expect(await res.json()).toEqual({ error: 'payload_too_large', maxBodyBytes: 64 * 1024 });
    }
    // Chunked, no length: refused once more than 64 KiB arrived; the rest is dropped and the client reads the 413.
    const chunked = await streamPost(
      url,
      { 'Awa-Signature': header, 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' },
      10 * 1024 * 1024,
    );
    expect(chunked).toEqual({ status: 413, written: 10 * 1024 * 1024 });
    // Declared larger than the receiver will read and drop (16 MiB): answered at once, long before it is sent, and
    // the connection closed under the rest. The client reads the 413, or, when the close reaches it first (a busy
    // machine did), a broken pipe or a reset: docs/callbacks.md says so. Either way it stopped early.
    const total = 256 * 1024 * 1024;
    const declared = await streamPost(
      url,
      { 'Awa-Signature': header, 'Content-Type': 'application/json', 'Content-Length': String(total) },
      total,
    );
    if (declared.closed === undefined) expect(declared.status).toBe(413);
    else expect(['EPIPE', 'ECONNRESET']).toContain(declared.closed);
    expect(declared.written).toBeLessThan(32 * 1024 * 1024);
    // A signed, valid callback just over the limit: 413 too, and nothing changed.
    const big = await post(
      url,
      { token: job!.token, action: 'complete', payload: 'x'.repeat(64 * 1024) },
      { secret: SECRET },
    );
    expect(big.status).toBe(413);
    expect(await snapshot(job!.id)).toEqual(before);
  });

  it('answers 400 to a malformed callback only once it is signed (401 before)', async () => {
    const [job] = await parked('rcv_malformed', 1);
    const before = await snapshot(job!.id);
    const bad: [string, string][] = [
      ['not JSON', '{"token": '],
      ['an array', '[]'],
      ['no token', JSON.stringify({ action: 'complete' })],
      ['a token that is no UUID', JSON.stringify({ token: 'abc', action: 'complete' })],
      ['an unknown action', JSON.stringify({ token: job!.token, action: 'approve' })],
      [
        'a field the action does not take',
        JSON.stringify({ token: job!.token, action: 'retry', payload: 1 }),
      ],
      ['a bad delay', JSON.stringify({ token: job!.token, action: 'retry', delayMs: -5 })],
      ['an error that is no string', JSON.stringify({ token: job!.token, action: 'fail', error: 42 })],
    ];
    for (const [name, body] of bad) {
      const unsigned = await post(url, body, { header: signatureHeader(OTHER, body) });
      expect({ name, status: unsigned.status }).toEqual({ name, status: 401 });
      const signed = await post(url, body, { secret: SECRET });
      expect({ name, status: signed.status, error: (signed.json as { error?: string }).error }).toEqual({
        name,
        status: 400,
        error: 'bad_request',
      });
    }
    expect((await fetch(url)).status).toBe(405);
    expect(await snapshot(job!.id)).toEqual(before);
  });
});

describe('accepted callbacks', () => {
  it('complete, fail, retry, cancel and resume settle parked jobs (any configured secret, several v1=)', async () => {
    const jobs = await parked('rcv_settle', 5);
    const [complete, fail, retry, cancel, resume] = jobs as [
      (typeof jobs)[0],
      (typeof jobs)[0],
      (typeof jobs)[0],
      (typeof jobs)[0],
      (typeof jobs)[0],
    ];
    const ok = (r: Awaited<ReturnType<typeof post>>, id: string) =>
      expect(r).toMatchObject({ status: 200, json: { outcome: 'settled', jobId: id } });

    ok(
      await post(url, { token: complete.token, action: 'complete', payload: { n: 1 } }, { secret: SECRET }),
      complete.id,
    );
    // Signed during a rotation: the old secret, and one v1= per secret (one of them unknown here).
    ok(
      await post(url, { token: fail.token, action: 'fail', error: 'card declined' }, { secret: OLD_SECRET }),
      fail.id,
    );
    const before = Date.now();
    ok(
      await post(
        url,
        { token: retry.token, action: 'retry', delayMs: 60_000, error: 'busy' },
        { secret: [OTHER, SECRET] },
      ),
      retry.id,
    );
    ok(
      await post(url, { token: cancel.token, action: 'cancel', error: 'withdrawn' }, { secret: SECRET }),
      cancel.id,
    );
    ok(
      await post(
        url,
        { token: resume.token, action: 'resume', payload: { approved: true } },
        { secret: SECRET },
      ),
      resume.id,
    );

    expect(await client.getJob(complete.id)).toMatchObject({
      state: 'completed',
      meta: { result: { n: 1 } },
    });
    const failed = await client.getJob(fail.id);
    expect(failed).toMatchObject({ state: 'failed', attempt: 1 });
    expect(failed?.meta?.errors?.at(-1)?.error).toBe('card declined');
    const retrying = await client.getJob(retry.id);
    expect(retrying).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(retrying!.runAt!.getTime()).toBeGreaterThanOrEqual(before + 60_000 - 1_000);
    expect(retrying?.meta?.errors?.at(-1)?.error).toBe('busy');
    const cancelled = await client.getJob(cancel.id);
    expect(cancelled?.state).toBe('cancelled');
    expect(cancelled?.meta?.errors?.at(-1)?.error).toBe('withdrawn');
    await until(
      'the resumed job to complete',
      async () => (await client.getJob(resume.id))?.state === 'completed',
    );
    expect((await client.getJob(resume.id))?.attempt).toBe(1);
  });

  it('delivers to a handler waiting in its attempt', async () => {
    const kind = defineJob<Args>({ kind: 'rcv_wait_kind', queue: 'rcv_wait' });
    let token = '';
    const got: unknown[] = [];
    const h = new WorkerHost({ connectionString: db.url, queues: { rcv_wait: 1 }, ...FAST });
    h.on('error', () => {});
    h.register(kind, async (_job, ctx) => {
      token = await ctx.registerCallback();
      got.push(await ctx.waitForCallback(token, { timeoutMs: 10_000 }));
    });
    await h.start();
    hosts.push(h);
    const { id } = await client.enqueue(kind, { n: 1 });
    await until(
      'the handler to wait',
      async () => token !== '' && (await client.getJob(id))?.state === 'running',
    );
    const r = await post(url, { token, action: 'complete', payload: { step: 2 } }, { secret: SECRET });
    expect(r).toMatchObject({ status: 200, json: { outcome: 'delivered', jobId: id } });
    await until('completed', async () => (await client.getJob(id))?.state === 'completed');
    expect(got).toEqual([{ step: 2 }]);
  });
});

describe('configuration', () => {
  it('is checked once, naming the field', () => {
    const field = fieldOf;
    expect(field(() => createCallbackReceiver({ client }))).toBe('secret');
    expect(field(() => createCallbackReceiver({ client, secret: SECRET, secrets: [SECRET] }))).toBe('secret');
    expect(field(() => createCallbackReceiver({ client, secret: 'short' }))).toBe('secret');
    expect(field(() => createCallbackReceiver({ client, secrets: [] }))).toBe('secrets');
    expect(field(() => createCallbackReceiver({ client, secret: SECRET, toleranceSeconds: 0 }))).toBe(
      'toleranceSeconds',
    );
    expect(field(() => createCallbackReceiver({ client, secret: SECRET, maxBodyBytes: 1.5 }))).toBe(
      'maxBodyBytes',
    );
    expect(field(() => createCallbackReceiver({ client: {} as AwaClient, secret: SECRET }))).toBe('client');
  });
});
