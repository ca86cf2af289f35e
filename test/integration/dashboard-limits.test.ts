import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type RunningServer } from '../../src/index.js';
import type { QueueLimits } from '../../src/model/limits.js';
import { createTestSchema, type TestSchema } from '../../src/testing/index.js';
import { claimAsHost, declareLimitedHost } from '../helpers/limited-host.js';
import { serverUrl } from '../helpers/database.js';

// The dashboard's limits API over real HTTP against a real schema: the limited queues beside the list, a queue's
// limits, where they come from and what they hold (running attempts, jobs waiting at the gate, the busiest keys); an override set and
// cleared from the dashboard, audited as the login, and applied by the next claim; bad input answered 400
// naming the field; a read-only login and a session without the CSRF header refused, changing nothing.

const TOKEN = 'dashboard-limits-token-0123456';
const READ_TOKEN = 'dashboard-limits-read-token-789';
const HOUR = 3_600_000;
/** Declared as a host would: the key from args.tenant, 2 running per key, a rate of an hour (so the recent
 * starts a read counts do not age out while the test runs), 50 running in the queue. */
const DECLARED: QueueLimits = {
  key: { arg: 'tenant' },
  perKey: { concurrency: 2, rate: { limit: 100, periodMs: HOUR, burst: 100 } },
  queue: { concurrency: 50 },
};

let t: TestSchema;
let server: RunningServer;

beforeAll(async () => {
  t = await createTestSchema({ connectionString: serverUrl() });
  await declareLimitedHost(t, 'limits-host', DECLARED);
  await t.client.enqueueMany([
    { kind: 'call', args: { tenant: 'a', n: 1 }, options: { queue: 'api' } },
    { kind: 'call', args: { tenant: 'a', n: 2 }, options: { queue: 'api' } },
    { kind: 'call', args: { tenant: 'a', n: 3 }, options: { queue: 'api' } },
    { kind: 'call', args: { tenant: 'b', n: 4 }, options: { queue: 'api' } },
    { kind: 'call', args: {}, options: { queue: 'plain' } },
  ]);
  // Tenant a's third job is over its 2 running: it waits at the gate.
  expect(await claimAsHost(t, 'limits-host')).toBe(3);
  server = await startDashboard({
    client: t.client,
    auth: { token: TOKEN },
    readOnly: { token: READ_TOKEN },
    port: 0,
  });
});
afterAll(async () => {
  await server?.close();
  await t?.drop();
});

async function api(
  path: string,
  init: RequestInit & { token?: string } = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${server.url}/dashboard/api${path}`, {
    ...init,
    headers: {
      authorization: `Bearer ${init.token ?? TOKEN}`,
      ...(init.headers as Record<string, string>),
    },
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const setLimits = (queue: string, body: unknown, token = TOKEN) =>
  api(`/queues/${queue}/limits`, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('reading limits', () => {
  it('GET /queues?limits=1 adds every limited queue to the list; GET /queues/:queue/limits adds its busiest keys', async () => {
    // No override yet: what claims apply is what the host declared.
    const list = await api('/queues?limits=1');
    expect(list.status).toBe(200);
    expect(list.body.limits).toEqual([
      {
        queue: 'api',
        declared: DECLARED,
        override: null,
        effective: DECLARED,
        running: 3,
        waiting: 1,
        keys: [],
      },
    ]);
    // The gate's jobs count as available.
    expect((list.body.queues as { queue: string }[]).find((q) => q.queue === 'api')).toMatchObject({
      available: 1,
    });
    expect((await api('/queues')).body).not.toHaveProperty('limits');
    const one = await api('/queues/api/limits');
    expect(one.status).toBe(200);
    expect(one.body).toEqual({
      queue: 'api',
      limits: {
        queue: 'api',
        declared: DECLARED,
        override: null,
        effective: DECLARED,
        running: 3,
        waiting: 1,
        keys: [
          { key: 'a', running: 2, waiting: 1, recentStarts: 2 },
          { key: 'b', running: 1, waiting: 0, recentStarts: 1 },
        ],
      },
    });
    expect(((await api('/queues/api/limits?keys=1')).body.limits as { keys: unknown[] }).keys).toEqual([
      { key: 'a', running: 2, waiting: 1, recentStarts: 2 },
    ]);
    // A queue without limits answers null: its page offers to set some.
    expect(await api('/queues/plain/limits')).toEqual({
      status: 200,
      body: { queue: 'plain', limits: null },
    });
  });

  it('answers a bad parameter with 400 naming it', async () => {
    expect(await api('/queues/api/limits?keys=many')).toMatchObject({
      status: 400,
      body: { error: 'invalid_request', field: 'keys', message: expect.stringMatching(/from 0 to 1000/) },
    });
    expect(await api('/queues?limits=yes')).toMatchObject({
      status: 400,
      body: { field: 'limits', message: expect.stringMatching(/must be 1 or 0/) },
    });
    expect(await api('/queues/api/limits?colour=red')).toMatchObject({
      status: 400,
      body: { field: 'colour' },
    });
  });
});

describe('overriding limits', () => {
  it('sets an override field by field, audited as the login, and the next claim applies it', async () => {
    const override = { perKey: { concurrency: 3 }, queue: { concurrency: null } };
    const effective = {
      key: { arg: 'tenant' },
      perKey: { concurrency: 3, rate: { limit: 100, periodMs: HOUR, burst: 100 } },
    };
    expect(await setLimits('api', { override })).toEqual({
      status: 200,
      body: { queue: 'api', override, effective },
    });
    const [record] = await t.client.auditLog({ limit: 1 });
    expect(record).toMatchObject({
      actor: 'token',
      origin: '127.0.0.1',
      action: 'queue.limits',
      target: 'api',
      detail: { override },
    });
    expect((await api('/queues/api/limits?keys=0')).body.limits).toMatchObject({
      override,
      effective,
      running: 3,
      waiting: 1,
    });
    // Tenant a has room for a third attempt now: the job at the gate starts.
    expect(await claimAsHost(t, 'limits-host')).toBe(1);
    expect((await api('/queues/api/limits')).body.limits).toMatchObject({
      running: 4,
      waiting: 0,
      keys: [
        { key: 'a', running: 3, waiting: 0, recentStarts: 3 },
        { key: 'b', running: 1, waiting: 0, recentStarts: 1 },
      ],
    });
  });

  it('refuses bad input with 400 naming the field, an unknown queue with 404, and changes nothing', async () => {
    const before = (await api('/queues/api/limits?keys=0')).body.limits;
    const auditBefore = (await t.client.auditLog({ limit: 1 }))[0]!.id;
    const cases: [unknown, string, RegExp][] = [
      [{ override: { perKey: { concurrency: 0 } } }, 'limits.perKey.concurrency', /from 1 to 1000000, got 0/],
      [
        { override: { perKey: { rate: { limit: 10, burst: 20 } } } },
        'limits.perKey.rate.burst',
        /from 1 to 10/,
      ],
      [
        { override: { queue: { rate: { limit: 5, periodMs: 0 } } } },
        'limits.queue.rate.periodMs',
        /from 1 to/,
      ],
      [{ override: { perKey: { colour: 1 } } }, 'limits.perKey.colour', /not a known option/],
      [{ override: 5 }, 'override', /object of limits, or null/],
      [{ overide: {} }, 'overide', /not accepted/],
    ];
    for (const [body, field, message] of cases) {
      const res = await setLimits('api', body);
      expect({ field, status: res.status, body: res.body }).toEqual({
        field,
        status: 400,
        body: {
          error: 'invalid_request',
          code: field.startsWith('limits.') ? 'AWA_INVALID_OPTION' : 'AWA_INVALID_REQUEST',
          field,
          message: expect.stringMatching(message),
        },
      });
    }
    expect(await setLimits('nowhere', { override: { perKey: { concurrency: 1 } } })).toMatchObject({
      status: 404,
      body: { error: 'not_found', code: 'AWA_UNKNOWN_QUEUE' },
    });
    expect((await api('/queues/api/limits?keys=0')).body.limits).toEqual(before);
    expect((await t.client.auditLog({ limit: 1 }))[0]!.id).toBe(auditBefore);
  });

  it('a read-only login and a session without the CSRF header are refused; override null resets', async () => {
    // A browser's session (its login is audited: counted from after it) must send the CSRF token the page carries.
    const login = await fetch(`${server.url}/dashboard/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { origin: server.url, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ password: TOKEN }).toString(),
    });
    expect(login.status).toBe(303);
    const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
    const shell = await (await fetch(`${server.url}/dashboard/`, { headers: { cookie } })).text();
    const csrf = /name="awa-csrf" content="([^"]+)"/.exec(shell)![1]!;
    const post = (headers: Record<string, string>) =>
      fetch(`${server.url}/dashboard/api/queues/api/limits`, {
        method: 'POST',
        headers: { cookie, origin: server.url, 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ override: null }),
      });
    const before = (await api('/queues/api/limits?keys=0')).body.limits;
    const auditBefore = (await t.client.auditLog({ limit: 1 }))[0]!.id;
    expect(await api('/queues/api/limits', { token: READ_TOKEN })).toMatchObject({ status: 200 });
    expect(await setLimits('api', { override: null }, READ_TOKEN)).toEqual({
      status: 403,
      body: { error: 'forbidden', message: 'this login is read-only: it may look but not act' },
    });
    const forged = await post({});
    expect(forged.status).toBe(403);
    expect(await forged.json()).toEqual({
      error: 'forbidden',
      message: 'missing or wrong x-awa-csrf header',
    });
    expect((await api('/queues/api/limits?keys=0')).body.limits).toEqual(before);
    expect((await t.client.auditLog({ limit: 1 }))[0]!.id).toBe(auditBefore);

    const reset = await post({ 'x-awa-csrf': csrf });
    expect(reset.status).toBe(200);
    expect(await reset.json()).toEqual({ queue: 'api', override: null, effective: DECLARED });
    expect((await t.client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: 'token',
      action: 'queue.limits.reset',
      target: 'api',
      detail: { override: null },
    });
    expect((await api('/queues/api/limits?keys=0')).body.limits).toMatchObject({
      override: null,
      effective: DECLARED,
    });
  });
});
