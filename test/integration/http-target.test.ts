import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  defineJob,
  httpTarget,
  serveCallbacks,
  signatureHeader,
  verifySignature,
  WorkerHost,
  type JobRecord,
  type RunningServer,
  type WorkerOptions,
} from '../../src/index.js';
import { createTestDatabase } from '../helpers/database.js';
import { post } from '../helpers/signed-post.js';
import { until } from '../helpers/wait.js';
import { fieldOf } from '../helpers/option-error.js';

// HTTP worker targets end to end: a worker host POSTs each attempt to a local test service, which answers
// done / failed / retry / 202-then-callback (through the real callback receiver) / 500, or hangs; outcomes are
// read back from the database.

const SECRET = 'target-secret-0123456789abcdefgh';
const FAST: Partial<WorkerOptions> = {
  pollIntervalMs: 20,
  promoteIntervalMs: 20,
  leaderElectionIntervalMs: 50,
  shutdownTimeoutMs: 3_000,
};

type Mode =
  'done' | 'failed' | 'retry' | 'accept' | 'accept-first' | 'error500' | 'hang' | 'unsigned' | 'other-token';
type Args = { mode: Mode };

interface Seen {
  body: {
    job: {
      id: string;
      kind: string;
      queue: string;
      args: Args;
      attempt: number;
      maxAttempts: number;
      runLease: number;
      metadata: Record<string, unknown>;
    };
    callback: { token: string; url?: string };
  };
  signed: boolean;
  at: number;
  /** Set when the connection closed before an answer was sent (the worker aborted the request). */
  aborted?: boolean;
}

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let client: AwaClient;
let receiver: RunningServer;
let service: Server;
let serviceUrl: string;
const seen = new Map<string, Seen[]>();
let host: WorkerHost;

const remote = defineJob<Args>({ kind: 'remote', queue: 'remote', maxAttempts: 3 });
const remoteOnce = defineJob<Args>({ kind: 'remote_once', queue: 'remote', maxAttempts: 1 });
const remoteSlow = defineJob<Args>({ kind: 'remote_slow', queue: 'remote', maxAttempts: 2 });
const remoteDeadline = defineJob<Args>({
  kind: 'remote_deadline',
  queue: 'remote',
  maxAttempts: 1,
  deadlineMs: 300,
});

/** Answers with a signed JSON body, as a service following docs/callbacks.md does. */
function reply(res: ServerResponse, status: number, body: unknown, secret: string | null = SECRET): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    ...(secret ? { 'Awa-Signature': signatureHeader(secret, text) } : {}),
  });
  res.end(text);
}

/** The callback the service sends later, through the receiver, signed. */
const callBack = (cbUrl: string, body: unknown) => post(cbUrl, body, { secret: SECRET });

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const raw = Buffer.concat(chunks);
  const body = JSON.parse(raw.toString('utf8')) as Seen['body'];
  const entry: Seen = {
    body,
    signed: verifySignature(req.headers['awa-signature'] as string | undefined, raw, [SECRET]),
    at: Date.now(),
  };
  const list = seen.get(body.job.id) ?? [];
  list.push(entry);
  seen.set(body.job.id, list);
  res.on('close', () => {
    if (!res.writableFinished) entry.aborted = true;
  });
  const { token, url: cbUrl } = body.callback;
  switch (body.job.args.mode) {
    case 'done':
      return reply(res, 200, { status: 'done', token, result: { charged: true } });
    case 'failed':
      return reply(res, 200, { status: 'failed', token, error: 'card declined' });
    case 'retry':
      if (body.job.attempt === 1)
        return reply(res, 200, { status: 'retry', token, delayMs: 300, error: 'busy' });
      return reply(res, 200, { status: 'done', token });
    case 'accept':
      // Accept now, answer later through the callback receiver.
      reply(res, 202, {});
      setTimeout(() => void callBack(cbUrl!, { token, action: 'complete', payload: { later: true } }), 400);
      return;
    case 'accept-first':
      // The callback overtakes the 202: it reaches the attempt before the worker has parked it.
      await callBack(cbUrl!, { token, action: 'complete', payload: { early: true } });
      return reply(res, 202, {});
    case 'error500':
      res.writeHead(500, { 'Content-Type': 'text/plain' });
      return void res.end('upstream exploded');
    case 'unsigned':
      return reply(res, 200, { status: 'done', token }, null);
    case 'other-token':
      return reply(res, 200, { status: 'done', token: '00000000-0000-4000-8000-000000000000' });
    case 'hang':
      return; // never answers
  }
}

beforeAll(async () => {
  db = await createTestDatabase('http_target');
  client = new AwaClient({ connectionString: db.url });
  await client.migrate();
  receiver = await serveCallbacks({ client, secret: SECRET, port: 0 });
  service = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      res.writeHead(599);
      res.end(String(err));
    });
  });
  await new Promise<void>((r) => service.listen(0, '127.0.0.1', r));
  serviceUrl = `http://127.0.0.1:${(service.address() as AddressInfo).port}/run`;

  const target = { url: serviceUrl, secret: SECRET, callbackUrl: `${receiver.url}/callbacks` };
  host = new WorkerHost({ connectionString: db.url, queues: { remote: 10 }, ...FAST });
  host.on('error', () => {});
  host
    .register(remote, httpTarget(target))
    .register(remoteOnce, httpTarget(target))
    .register(remoteSlow, httpTarget({ ...target, timeoutMs: 300 }))
    .register(remoteDeadline, httpTarget(target));
  await host.start();
});
afterEach(() => {
  // Hung requests of a test end with it.
  service.closeAllConnections();
});
afterAll(async () => {
  await host?.stop();
  await receiver?.close();
  await new Promise((r) => service?.close(r));
  await client?.close();
  await db?.drop();
});

const settledTo = async (id: string, states: string[]): Promise<JobRecord> =>
  until(`job ${id} to be ${states.join(' or ')}`, async () => {
    const j = await client.getJob(id);
    return j && states.includes(j.state) ? j : undefined;
  });
const lastError = (j: JobRecord) => j.meta?.errors?.at(-1)?.error;

describe('HTTP worker targets', () => {
  it('POSTs the signed attempt and completes the job on 200 done', async () => {
    const { id } = await client.enqueue(remote, { mode: 'done' }, { metadata: { order: 7 } });
    const job = await settledTo(id, ['completed']);
    expect(job.attempt).toBe(1);
    const [req] = seen.get(id)!;
    expect(req!.signed).toBe(true);
    expect(req!.body).toEqual({
      job: {
        id,
        kind: 'remote',
        queue: 'remote',
        args: { mode: 'done' },
        attempt: 1,
        maxAttempts: 3,
        runLease: 1,
        metadata: { order: 7 },
      },
      callback: { token: expect.stringMatching(/^[0-9a-f-]{36}$/), url: `${receiver.url}/callbacks` },
    });
  });

  it('fails the job for good on 200 failed', async () => {
    const { id } = await client.enqueue(remote, { mode: 'failed' });
    const job = await settledTo(id, ['failed']);
    expect(job.attempt).toBe(1);
    expect(lastError(job)).toBe('card declined');
  });

  it('retries after the delay a 200 retry asks for, then completes', async () => {
    const { id } = await client.enqueue(remote, { mode: 'retry' });
    const job = await settledTo(id, ['completed']);
    expect(job.attempt).toBe(2);
    const [first, second] = seen.get(id)!;
    expect(second!.body.job.attempt).toBe(2);
    expect(second!.body.callback.token).not.toBe(first!.body.callback.token);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(300);
  });

  it('parks on 202 and completes when the service calls back through the receiver', async () => {
    const { id } = await client.enqueue(remote, { mode: 'accept' });
    await settledTo(id, ['waiting_external']);
    const job = await settledTo(id, ['completed']);
    expect(job.attempt).toBe(1);
    expect(job.meta).toMatchObject({ result: { later: true } });
    // The token was used: calling back again is refused and changes nothing.
    const again = await callBack(`${receiver.url}/callbacks`, {
      token: seen.get(id)![0]!.body.callback.token,
      action: 'fail',
      error: 'late',
    });
    expect(again.status).toBe(409);
    expect((await client.getJob(id))?.state).toBe('completed');
  });

  it('settles the job when the callback overtakes the 202', async () => {
    const { id } = await client.enqueue(remote, { mode: 'accept-first' });
    const job = await settledTo(id, ['completed']);
    expect(job.meta).toMatchObject({ result: { early: true } });
  });

  it('treats a 500 as a failed attempt: retried, the status in the error', async () => {
    const { id } = await client.enqueue(remote, { mode: 'error500' });
    const job = await settledTo(id, ['retryable']);
    expect(job.attempt).toBe(1);
    expect(lastError(job)).toMatch(/answered 500: upstream exploded/);
    expect(job.meta?.errors?.at(-1)?.name).toBe('HttpTargetError');
    const { id: once } = await client.enqueue(remoteOnce, { mode: 'error500' });
    expect(lastError(await settledTo(once, ['failed']))).toMatch(/answered 500/);
    await client.cancel(id);
  });

  it('refuses an unsigned 200, or one signed for another attempt', async () => {
    const { id: unsigned } = await client.enqueue(remoteOnce, { mode: 'unsigned' });
    expect(lastError(await settledTo(unsigned, ['failed']))).toMatch(/without a valid Awa-Signature/);
    const { id: replayed } = await client.enqueue(remoteOnce, { mode: 'other-token' });
    expect(lastError(await settledTo(replayed, ['failed']))).toMatch(/for another attempt/);
  });

  it("aborts a request that outlives the target's timeout, and retries", async () => {
    const { id } = await client.enqueue(remoteSlow, { mode: 'hang' });
    const job = await settledTo(id, ['retryable']);
    expect(job.attempt).toBe(1);
    expect(lastError(job)).toMatch(/did not answer within 300 ms/);
    await until('the service to see the request aborted', async () => seen.get(id)?.[0]?.aborted);
    await client.cancel(id);
  });

  it("aborts the request at the kind's deadline", async () => {
    const { id } = await client.enqueue(remoteDeadline, { mode: 'hang' });
    const job = await settledTo(id, ['failed']);
    expect(job.meta?.errors?.at(-1)?.name).toBe('DeadlineExceeded');
    await until('the service to see the request aborted', async () => seen.get(id)?.[0]?.aborted);
  });

  it('a cancel of the running job aborts its request in flight', async () => {
    const { id } = await client.enqueue(remote, { mode: 'hang' });
    await until('the request to arrive', async () => seen.get(id)?.length === 1);
    expect(await client.cancel(id, 'no longer needed')).toBe('running');
    await until('the service to see the request aborted', async () => seen.get(id)?.[0]?.aborted);
    const job = await client.getJob(id);
    expect(job).toMatchObject({ state: 'cancelled', attempt: 1 });
    expect(seen.get(id)).toHaveLength(1);
  });
});

describe('httpTarget options', () => {
  it('are checked when the target is defined, naming the field', () => {
    const field = fieldOf;
    const url = 'https://payments.example/run';
    expect(field(() => httpTarget({ url: 'ftp://x/y', secret: SECRET }))).toBe('httpTarget.url');
    expect(field(() => httpTarget({ url: 'not a url', secret: SECRET }))).toBe('httpTarget.url');
    expect(field(() => httpTarget({ url }))).toBe('httpTarget.secret');
    expect(field(() => httpTarget({ url, secret: 'short' }))).toBe('httpTarget.secret');
    expect(field(() => httpTarget({ url, secretEnv: 'AWA_TEST_SURELY_UNSET' }))).toBe('httpTarget.secretEnv');
    expect(field(() => httpTarget({ url, secret: SECRET, timeoutMs: 0 }))).toBe('httpTarget.timeoutMs');
    expect(field(() => httpTarget({ url, secret: SECRET, callbackUrl: 'x' }))).toBe('httpTarget.callbackUrl');
    expect(field(() => httpTarget({ url, secret: SECRET, tolerance: 5 } as never))).toBe(
      'httpTarget.tolerance',
    );
    process.env.AWA_TEST_TARGET_SECRET = `${SECRET},old-secret-0123456789abcdef`;
    expect(() => httpTarget({ url, secretEnv: 'AWA_TEST_TARGET_SECRET' })).not.toThrow();
    delete process.env.AWA_TEST_TARGET_SECRET;
    // Targets run on the coordinator: a pool kind is refused when registered.
    const pooled = defineJob({ kind: 'pooled_remote', execution: 'pool' });
    const h = new WorkerHost({ connectionString: db.url, maintenance: false });
    expect(field(() => h.register(pooled, httpTarget({ url, secret: SECRET })))).toBe(
      'handler for "pooled_remote"',
    );
  });
});
