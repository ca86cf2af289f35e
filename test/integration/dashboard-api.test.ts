import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  createCallbackReceiver,
  createDashboard,
  createHttpApp,
  CSRF_HEADER,
  listen,
  startDashboard,
  type JobPage,
  type RunningServer,
} from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { hostname } from 'node:os';
import { HOSTILE_TEXT, seedDashboard, WEBHOOK_URL, type DashboardSeed } from '../helpers/dashboard-seed.js';

// The dashboard's JSON API over real HTTP against a real database seeded by a real worker host: every read
// answers what the engine holds, searches page through keyset cursors to the end, and every action changes
// the job as the client would.

const TOKEN = 'integration-dashboard-token-0123';

let db: TestDatabase;
let client: AwaClient;
let server: RunningServer;
let seed: DashboardSeed;

beforeAll(async () => {
  db = await createTestDatabase('dashboard_api');
  client = new AwaClient({ connectionString: db.url, poolSize: 4 });
  await client.migrate();
  seed = await seedDashboard(db.url, client);
  server = await startDashboard({ client, auth: { token: TOKEN }, port: 0 });
});
afterAll(async () => {
  await server?.close();
  await seed?.stop();
  await client?.close();
  await db?.drop();
});

async function api<T = Record<string, unknown>>(
  path: string,
  init: RequestInit = {},
): Promise<{ status: number; body: T }> {
  const res = await fetch(`${server.url}/dashboard/api${path}`, {
    ...init,
    headers: { authorization: `Bearer ${TOKEN}`, ...(init.headers as Record<string, string>) },
  });
  return { status: res.status, body: (await res.json()) as T };
}

const act = (path: string, body: unknown = {}) =>
  api(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** Every job of a search, following `next` to the end; fails on a page that repeats nothing but old jobs. */
async function allPages(params: Record<string, string>): Promise<{ ids: string[] }> {
  const ids = new Set<string>();
  let cursor: Record<string, string> = {};
  for (let pages = 1; pages < 100; pages++) {
    const { status, body } = await api<JobPage>(`/jobs?${new URLSearchParams({ ...params, ...cursor })}`);
    expect(status).toBe(200);
    for (const j of body.jobs) ids.add(j.id);
    if (!body.next) return { ids: [...ids] };
    cursor = body.next as Record<string, string>;
  }
  throw new Error('paging did not end');
}

describe('while a worker host runs', () => {
  it('GET /queues: per-queue health from the engine', async () => {
    const { status, body } = await api<{ queues: { queue: string; [k: string]: unknown }[] }>('/queues');
    expect(status).toBe(200);
    const byName = Object.fromEntries(body.queues.map((q) => [q.queue, q]));
    expect(byName.reports).toMatchObject({ available: 6, scheduled: 1, paused: false });
    expect(byName.media).toMatchObject({ running: 1 });
    expect(byName.mail).toMatchObject({ completedRecent: 24, failedRecent: 1 });
    expect(byName.billing).toMatchObject({ failedRecent: 3 });
  });

  it('GET /queues: failed and DLQ totals per queue', async () => {
    const { body } = await api<{ queues: { queue: string; failed: number; dlq: number }[] }>('/queues');
    const totals = body.queues.map(({ queue, failed, dlq }) => ({ queue, failed, dlq }));
    expect(totals).toEqual([
      { queue: 'billing', failed: 0, dlq: 3 },
      { queue: 'mail', failed: 1, dlq: 0 },
      { queue: 'media', failed: 0, dlq: 0 },
      { queue: 'reports', failed: 0, dlq: 0 },
      { queue: 'webhooks', failed: 0, dlq: 1 },
    ]);
  });

  it('GET /jobs/:id: a running job says when and by which runtime it was claimed; others say nothing', async () => {
    const before = new Date();
    const { body } = await api<{ job: { state: string; claim: Record<string, unknown> | null } }>(
      `/jobs/${seed.running}`,
    );
    const runtimes = await api<{ runtimes: { instanceId: string; live: boolean }[] }>('/runtimes');
    const live = runtimes.body.runtimes.filter((r) => r.live);
    expect(live).toHaveLength(1);
    expect(body.job.state).toBe('running');
    // The seed's host runs in this process.
    expect(body.job.claim).toMatchObject({
      instanceId: live[0]!.instanceId,
      hostname: hostname(),
      pid: process.pid,
    });
    const claimedAt = new Date(body.job.claim!.at as string);
    expect(claimedAt.getTime()).toBeLessThanOrEqual(before.getTime());
    const progress = await client.jobProgress(seed.running);
    expect(claimedAt.getTime()).toBeLessThanOrEqual(progress!.updatedAt.getTime());
    // Terminal and backlog rows do not keep who ran an attempt.
    for (const id of [seed.failed, seed.dlq[0]!, seed.scheduled]) {
      expect((await api<{ job: { claim: unknown } }>(`/jobs/${id}`)).body.job.claim).toBeNull();
    }
  });

  it('GET /jobs/:id: a running job with its recorded progress', async () => {
    const { status, body } = await api<{
      job: { state: string; args: unknown };
      progress: { progress: unknown };
    }>(`/jobs/${seed.running}`);
    expect(status).toBe(200);
    expect(body.job).toMatchObject({ state: 'running', args: { file: 'talk.mp4' } });
    expect(body.progress.progress).toEqual({ percent: 40, stage: 'encoding' });
  });

  it('GET /runtimes: the live host and the leader', async () => {
    const { body } = await api<{
      runtimes: { instanceId: string; live: boolean; isLeader: boolean; queues: string[] }[];
      leader: string | null;
    }>('/runtimes');
    const live = body.runtimes.filter((r) => r.live);
    expect(live).toHaveLength(1);
    expect(live[0]!.queues.sort()).toEqual(['billing', 'mail', 'media', 'webhooks']);
    expect(body.leader).toBe(live[0]!.instanceId);
  });
});

describe('with the host stopped', () => {
  beforeAll(async () => {
    await seed.stop();
  });

  it('GET /jobs: each state of the seed, filtered by queue and kind', async () => {
    const list = async (q: string) => (await api<JobPage>(`/jobs?${q}`)).body.jobs.map((j) => j.id);
    expect((await list('state=available&queue=reports&kind=build_report')).sort()).toEqual(
      [...seed.available].sort(),
    );
    expect(await list('state=available&queue=reports&kind=other')).toEqual([]);
    expect(await list('state=scheduled')).toEqual([seed.scheduled]);
    expect(await list('state=failed&queue=mail')).toEqual([seed.failed]);
    expect((await list('state=dlq&queue=billing')).sort()).toEqual([...seed.dlq].sort());
  });

  it('GET /jobs: completed jobs page by time to the end without losing any (limit 5 over 24)', async () => {
    // How many pages depends on how the host grouped its settle flushes (a page of one millisecond is
    // widened); test/unit/dashboard.test.ts pins the paging rule itself on crafted times.
    const { ids } = await allPages({ state: 'completed', queue: 'mail', limit: '5' });
    expect(ids.sort()).toEqual([...seed.completed].sort());
  });

  it('GET /jobs: states listed by id page on beforeId, newest first', async () => {
    const first = await api<JobPage>('/jobs?state=dlq&queue=billing&limit=2');
    const sorted = [...seed.dlq].sort((a, b) => Number(BigInt(b) - BigInt(a)));
    expect(first.body.jobs.map((j) => j.id)).toEqual(sorted.slice(0, 2));
    expect(first.body.next).toEqual({ beforeId: sorted[1] });
    const second = await api<JobPage>(`/jobs?state=dlq&queue=billing&limit=2&beforeId=${sorted[1]}`);
    expect(second.body.jobs.map((j) => j.id)).toEqual(sorted.slice(2));
    expect(second.body.next).toBeNull();
  });

  it('GET /jobs: a time range keeps only jobs whose state time falls in it', async () => {
    const hourAgo = new Date(Date.now() - 3_600_000).toISOString();
    const inAnHour = new Date(Date.now() + 3_600_000).toISOString();
    const now = new Date().toISOString();
    expect(
      (await allPages({ state: 'completed', queue: 'mail', from: hourAgo, to: inAnHour })).ids,
    ).toHaveLength(24);
    expect((await allPages({ state: 'completed', queue: 'mail', from: inAnHour })).ids).toEqual([]);
    expect((await allPages({ state: 'completed', queue: 'mail', to: hourAgo })).ids).toEqual([]);
    expect((await allPages({ state: 'scheduled', to: now })).ids).toEqual([]);
    expect((await allPages({ state: 'scheduled', from: now })).ids).toEqual([seed.scheduled]);
  });

  it('GET /jobs/:id: a failed job with its error history; an unknown id is 404', async () => {
    const { body } = await api<{ job: { state: string; meta: { errors: { error: string }[] } } }>(
      `/jobs/${seed.failed}`,
    );
    expect(body.job.state).toBe('failed');
    expect(body.job.meta.errors.map((e) => e.error)).toEqual(['contacts API answered 503 three times']);
    const hostile = await api<{ job: { args: { note: string } } }>(`/jobs/${seed.hostile}`);
    expect(hostile.body.job.args.note).toBe(HOSTILE_TEXT);
    expect((await api('/jobs/999999999')).status).toBe(404);
  });

  it('POST /jobs/:id/cancel and /retry act on the job', async () => {
    const id = seed.available[0]!;
    expect((await act(`/jobs/${id}/cancel`)).body).toEqual({ id, cancelledFrom: 'available' });
    expect((await client.getJob(id))?.state).toBe('cancelled');
    expect((await act(`/jobs/${id}/cancel`)).body).toEqual({ id, cancelledFrom: null });
    expect((await act(`/jobs/${id}/retry`)).body).toEqual({ id, retried: true, from: 'cancelled' });
    expect((await act(`/jobs/${id}/retry`)).body).toEqual({
      id,
      retried: false,
      reason: 'not_retryable',
      state: 'available',
    });
    expect((await client.getJob(id))?.state).toBe('available');
    const bad = await act(`/jobs/${id}/retry`, { force: true });
    expect(bad).toMatchObject({ status: 400, body: { code: 'AWA_INVALID_REQUEST', field: 'force' } });
  });

  it('GET /dlq: entries newest first with their reason, queue and kind filters, and totals', async () => {
    type DlqPage = {
      jobs: {
        id: string;
        kind: string;
        queue: string;
        reason: string;
        attempt: number;
        maxAttempts: number;
      }[];
      next: { beforeId: string } | null;
      total: { count: number; capped: boolean };
      matching: { count: number; capped: boolean };
    };
    const billing = [...seed.dlq].sort((a, b) => Number(BigInt(b) - BigInt(a)));
    const all = await api<DlqPage>('/dlq');
    expect(all.status).toBe(200);
    expect(all.body.jobs.map((j) => [j.id, j.queue, j.kind, j.reason, j.attempt, j.maxAttempts])).toEqual([
      [seed.webhook, 'webhooks', 'deliver_webhook', `POST ${WEBHOOK_URL} answered 410 Gone`, 1, 1],
      ...billing.map((id) => {
        const invoice = `INV-100${seed.dlq.indexOf(id) + 1}`;
        return [id, 'billing', 'charge_card', `card declined for invoice ${invoice}`, 1, 1];
      }),
    ]);
    const four = { count: 4, capped: false };
    expect(all.body).toMatchObject({ next: null, total: four, matching: four });

    const page = (q: string) => api<DlqPage>(`/dlq?${q}`).then((r) => r.body);
    const ids = (p: DlqPage) => p.jobs.map((j) => j.id);
    const byQueue = await page('queue=billing');
    expect(ids(byQueue)).toEqual(billing);
    expect(byQueue).toMatchObject({ total: four, matching: { count: 3, capped: false } });
    const byKind = await page('kind=deliver_webhook');
    expect(ids(byKind)).toEqual([seed.webhook]);
    expect(byKind.matching).toEqual({ count: 1, capped: false });
    const neither = await page('queue=billing&kind=deliver_webhook');
    expect(neither).toEqual({ jobs: [], next: null, total: four, matching: { count: 0, capped: false } });
    // Keyset pages under a filter.
    const first = await page('queue=billing&kind=charge_card&limit=2');
    expect(ids(first)).toEqual(billing.slice(0, 2));
    expect(first.next).toEqual({ beforeId: billing[1] });
    const second = await page(`queue=billing&kind=charge_card&limit=2&beforeId=${billing[1]}`);
    expect(ids(second)).toEqual(billing.slice(2));
    expect(second.next).toBeNull();
    expect((await api('/dlq?state=failed')).body).toMatchObject({
      code: 'AWA_INVALID_REQUEST',
      field: 'state',
    });
  });

  it('countDlq counts under the same rule as a purge, and stops at its bound', async () => {
    expect(await client.countDlq()).toEqual({ count: 4, capped: false });
    expect(await client.countDlq({}, { atMost: 2 })).toEqual({ count: 2, capped: true });
    expect(await client.countDlq({ queue: 'billing' }, { atMost: 3 })).toEqual({ count: 3, capped: true });
    expect(await client.countDlq({ queue: 'billing', kind: 'charge_card' })).toEqual({
      count: 3,
      capped: false,
    });
    expect(await client.countDlq({ kind: 'deliver_webhook' })).toEqual({ count: 1, capped: false });
    const later = new Date(Date.now() + 60_000);
    expect(await client.purgeDlq({ queue: 'billing', before: later }, { dryRun: true })).toBe(3);
    expect(await client.purgeDlq({ before: new Date(0) }, { dryRun: true })).toBe(0);
  });

  it('POST /dlq/retry moves entries back to their queue; /dlq/purge deletes them', async () => {
    const [a, b] = seed.dlq;
    expect((await act('/dlq/retry', { ids: [a] })).body).toEqual({ retried: [a] });
    expect(await client.getJob(a!)).toMatchObject({ state: 'available', queue: 'billing', attempt: 0 });
    expect((await act('/dlq/purge', { ids: [b] })).body).toEqual({ purged: 1 });
    expect(await client.getJob(b!)).toBeNull();
    const dlq = await api<JobPage>('/dlq?queue=billing');
    expect(dlq.body.jobs.map((j) => j.id)).toEqual([seed.dlq[2]]);
    expect((await act('/dlq/retry', { ids: ['x'] })).body).toMatchObject({ field: 'ids[0]' });
  });

  it('POST /queues/:queue/pause and /resume change the fleet-wide flag', async () => {
    expect((await act('/queues/reports/pause')).body).toEqual({
      queue: 'reports',
      paused: true,
      changed: true,
    });
    expect((await act('/queues/reports/pause')).body).toMatchObject({ changed: false });
    const paused = await api<{ queues: { queue: string; paused: boolean }[] }>('/queues');
    expect(paused.body.queues.find((q) => q.queue === 'reports')?.paused).toBe(true);
    expect((await act('/queues/reports/resume')).body).toMatchObject({ paused: false, changed: true });
    expect((await client.counts()).find((c) => c.queue === 'reports')?.paused).toBe(false);
  });

  it('POST /queues/:queue/pause of a queue nothing names is 404 and creates no queue', async () => {
    for (const action of ['pause', 'resume']) {
      const r = await act(`/queues/no_such_queue/${action}`);
      expect(r.status).toBe(404);
      expect(r.body).toMatchObject({ error: 'not_found', code: 'AWA_UNKNOWN_QUEUE' });
    }
    expect((await client.counts()).map((c) => c.queue)).not.toContain('no_such_queue');
  });

  it('GET /cron and /storage: schedules and the ring with its tables', async () => {
    expect((await api('/cron')).body).toEqual({ schedules: [] });
    const { body } = await api<{ ring: { role: string }[]; tables: { family: string }[] }>('/storage');
    expect(body.ring.some((s) => s.role === 'current')).toBe(true);
    expect(body.tables.map((t) => t.family)).toEqual(
      expect.arrayContaining(['ready_entries', 'dlq_entries']),
    );
  });

  it('a browser session over HTTP: login form, cookie, CSRF header on an action', async () => {
    const login = await fetch(`${server.url}/dashboard/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { origin: server.url, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ password: TOKEN }),
    });
    expect(login.status).toBe(303);
    const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
    const shell = await (await fetch(`${server.url}/dashboard/`, { headers: { cookie } })).text();
    const csrf = /name="awa-csrf" content="([^"]+)"/.exec(shell)![1]!;
    const pause = (headers: Record<string, string>) =>
      fetch(`${server.url}/dashboard/api/queues/mail/pause`, {
        method: 'POST',
        headers: { cookie, origin: server.url, 'content-type': 'application/json', ...headers },
        body: '{}',
      });
    expect((await pause({})).status).toBe(403);
    expect((await pause({ [CSRF_HEADER]: csrf })).status).toBe(200);
    expect((await client.counts()).find((c) => c.queue === 'mail')?.paused).toBe(true);
    await client.resumeQueue('mail');
  });
});

it('createHttpApp serves the dashboard beside the callback receiver on one port', async () => {
  const app = createHttpApp({
    callbacks: createCallbackReceiver({ client, secret: 'callback-secret-0123456789abcdef' }),
    dashboard: createDashboard({ client, auth: { username: 'ops', password: 'hunter2hunter2' } }),
  });
  const both = await listen(app, { port: 0 });
  try {
    const unsigned = await fetch(`${both.url}/callbacks`, { method: 'POST', body: '{}' });
    expect(unsigned.status).toBe(401);
    const basic = `Basic ${Buffer.from('ops:hunter2hunter2').toString('base64')}`;
    const queues = await fetch(`${both.url}/dashboard/api/queues`, { headers: { authorization: basic } });
    expect(queues.status).toBe(200);
    expect(queues.headers.get('x-frame-options')).toBe('DENY');
    // The dashboard's headers stay on its own paths.
    expect(unsigned.headers.get('x-frame-options')).toBeNull();
  } finally {
    await both.close();
  }
});
