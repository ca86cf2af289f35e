import { describe, expect, it } from 'vitest';
import {
  createDashboard,
  CSRF_HEADER,
  DashboardConfigError,
  InvalidRequestError,
  isLoopback,
  type DashboardClient,
  type DashboardOptions,
} from '../../src/index.js';
import { Authenticator, originAllowed, safeEqual } from '../../src/http/dashboard/auth.js';
import { jobSearch, idList } from '../../src/http/dashboard/input.js';
import { searchJobs } from '../../src/http/dashboard/api.js';
import { escapeHtml, shellPage, loginPage } from '../../src/http/dashboard/pages.js';
import { JOB_STATES } from '../../src/model/job.js';

// The dashboard's edges without a database: configuration refused with the field named, credentials and
// sessions, CSRF and Origin checks on actions, input validation, escaping and the security headers. The
// client is a recording stand-in here (what it answers does not matter); test/integration/dashboard-api.test.ts
// runs the same API against PostgreSQL.

const TOKEN = 'unit-dashboard-token-0123456789';
const USER = { username: 'ops', password: 'correct horse battery' };

/** A client whose every method records its call and answers an empty result; the audit records the dashboard
 * writes of logins go to `audits`, apart from the calls that reach the engine. */
function recordingClient(): { client: DashboardClient; calls: string[]; audits: string[] } {
  const calls: string[] = [];
  const audits: string[] = [];
  const answer: Record<string, unknown> = {
    queueHealth: [],
    queueLimits: [],
    setQueueLimits: null,
    listJobs: [],
    compactHistorySpan: null,
    getJob: null,
    jobProgress: null,
    cancel: null,
    retryJob: null,
    retryDlq: [],
    purgeDlq: 0,
    dlqPage: [],
    countDlq: { count: 0, capped: false },
    pauseQueue: true,
    resumeQueue: true,
    recordAudit: {},
    auditLog: [],
    runtimeList: [],
    listCron: [],
    ringStatus: [],
    storageStatus: [],
    readLag: { reads: 'primary', bytesBehind: 0, lagMs: 0, replayedAt: null },
    listFlows: [],
    getFlow: null,
    cancelFlow: null,
  };
  const client = Object.fromEntries(
    Object.entries(answer).map(([name, value]) => [
      name,
      async (...args: unknown[]) => {
        (name === 'recordAudit' ? audits : calls).push(`${name} ${JSON.stringify(args)}`);
        return value;
      },
    ]),
  ) as unknown as DashboardClient;
  return { client, calls, audits };
}

function configError(options: Partial<DashboardOptions>): DashboardConfigError {
  const { client } = recordingClient();
  try {
    createDashboard({ client, env: {}, ...options } as DashboardOptions);
  } catch (err) {
    expect(err).toBeInstanceOf(DashboardConfigError);
    return err as DashboardConfigError;
  }
  throw new Error('expected a DashboardConfigError');
}

describe('dashboard configuration', () => {
  it('refuses to start without credentials, naming where they can come from', () => {
    const err = configError({});
    expect(err.code).toBe('AWA_INVALID_CONFIG');
    expect(err.field).toBe('auth');
    expect(err.message).toMatch(/AWA_DASHBOARD_TOKEN/);
  });

  it('takes credentials from the environment, and names the missing half of a user/password pair', () => {
    const { client } = recordingClient();
    expect(() => createDashboard({ client, env: { AWA_DASHBOARD_TOKEN: TOKEN } })).not.toThrow();
    expect(() =>
      createDashboard({ client, env: { AWA_DASHBOARD_USER: 'ops', AWA_DASHBOARD_PASSWORD: 'long enough' } }),
    ).not.toThrow();
    expect(configError({ env: { AWA_DASHBOARD_USER: 'ops' } }).field).toBe('AWA_DASHBOARD_PASSWORD');
    expect(configError({ env: { AWA_DASHBOARD_PASSWORD: 'long enough' } }).field).toBe('AWA_DASHBOARD_USER');
    expect(configError({ env: { AWA_DASHBOARD_TOKEN: 'short' } }).field).toBe('AWA_DASHBOARD_TOKEN');
  });

  it('validates every option and names the field', () => {
    expect(configError({ auth: { token: 'short' } }).field).toBe('auth.token');
    expect(configError({ auth: { username: 'a:b', password: 'long enough' } }).field).toBe('auth.username');
    expect(configError({ auth: { username: 'ops', password: 'short' } }).field).toBe('auth.password');
    expect(configError({ auth: { token: TOKEN, username: 'x' } as never }).field).toBe('auth');
    expect(configError({ auth: { token: TOKEN }, basePath: 'no-slash' }).field).toBe('basePath');
    expect(configError({ auth: { token: TOKEN }, allowedOrigins: ['https://x.example/path'] }).field).toBe(
      'allowedOrigins[0]',
    );
    expect(configError({ auth: { token: TOKEN }, sessionTtlMs: 5 }).field).toBe('sessionTtlMs');
    expect(configError({ auth: { token: TOKEN }, insecure: 'yes' as never }).field).toBe('insecure');
    expect(configError({ auth: { token: TOKEN }, colour: 'blue' } as never).field).toBe('colour');
    expect(configError({ auth: { token: TOKEN }, client: {} as never }).field).toBe('client');
  });

  it('refuses auth: false on a non-loopback host unless insecure is given', () => {
    const { client } = recordingClient();
    const err = configError({ auth: false, host: '0.0.0.0' });
    expect(err.field).toBe('auth');
    expect(err.message).toMatch(/not a loopback address/);
    expect(configError({ auth: false, host: '10.1.2.3' }).field).toBe('auth');
    expect(() => createDashboard({ client, auth: false, host: '0.0.0.0', insecure: true })).not.toThrow();
    expect(() => createDashboard({ client, auth: false, host: '127.0.0.1' })).not.toThrow();
    expect(() => createDashboard({ client, auth: false })).not.toThrow();
  });

  it('knows loopback addresses', () => {
    for (const h of ['127.0.0.1', '127.8.9.10', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1']) {
      expect(isLoopback(h), h).toBe(true);
    }
    for (const h of ['0.0.0.0', '::', '10.0.0.1', '192.168.1.1', 'example.com', '128.0.0.1', '::2']) {
      expect(isLoopback(h), h).toBe(false);
    }
  });
});

describe('credentials and sessions', () => {
  it('compares secrets by value, whatever their lengths', () => {
    expect(safeEqual(TOKEN, TOKEN)).toBe(true);
    expect(safeEqual(TOKEN, `${TOKEN}x`)).toBe(false);
    expect(safeEqual('', TOKEN)).toBe(false);
    expect(safeEqual(TOKEN.replace(/.$/, 'X'), TOKEN)).toBe(false);
  });

  it('accepts the right basic credentials and a bearer token only in its own mode', () => {
    const basic = new Authenticator({ mode: 'basic', ...USER }, 60_000);
    const header = (u: string, p: string) => `Basic ${Buffer.from(`${u}:${p}`).toString('base64')}`;
    expect(basic.identify(header('ops', USER.password), undefined)).toMatchObject({
      user: 'ops',
      via: 'basic',
    });
    expect(basic.identify(header('ops', 'wrong password'), undefined)).toBeNull();
    expect(basic.identify(header('root', USER.password), undefined)).toBeNull();
    expect(basic.identify(`Bearer ${TOKEN}`, undefined)).toBeNull();
    const token = new Authenticator({ mode: 'token', token: TOKEN }, 60_000);
    expect(token.identify(`Bearer ${TOKEN}`, undefined)).toMatchObject({ via: 'bearer', ambient: false });
    expect(token.identify(`Bearer ${TOKEN}0`, undefined)).toBeNull();
    expect(token.identify(header('x', TOKEN), undefined)).toBeNull();
  });

  it('sessions carry their own CSRF token and expire', () => {
    let now = 1_000_000;
    const auth = new Authenticator({ mode: 'token', token: TOKEN }, 60_000, () => now);
    const a = auth.startSession('token');
    const b = auth.startSession('token');
    const pa = auth.identify(undefined, a)!;
    const pb = auth.identify(undefined, b)!;
    expect(pa).toMatchObject({ via: 'session', ambient: true });
    expect(pa.csrfToken).toMatch(/^[\w-]{32}$/);
    expect(pa.csrfToken).not.toBe(pb.csrfToken);
    expect(auth.identify(undefined, 'made-up')).toBeNull();
    now += 60_001;
    expect(auth.identify(undefined, a)).toBeNull();
    const c = auth.startSession('token');
    auth.endSession(c);
    expect(auth.identify(undefined, c)).toBeNull();
  });

  it('accepts an action only from its own origin or an allowed one', () => {
    const allowed = new Set(['https://ops.example.com']);
    expect(originAllowed('http://127.0.0.1:8080', undefined, '127.0.0.1:8080', allowed)).toBe(true);
    expect(originAllowed('https://ops.example.com', undefined, 'internal:8080', allowed)).toBe(true);
    expect(originAllowed('https://evil.example', undefined, '127.0.0.1:8080', allowed)).toBe(false);
    expect(originAllowed('http://127.0.0.1:9999', undefined, '127.0.0.1:8080', allowed)).toBe(false);
    expect(originAllowed(undefined, 'http://127.0.0.1:8080/dashboard', '127.0.0.1:8080', allowed)).toBe(true);
    expect(originAllowed(undefined, undefined, '127.0.0.1:8080', allowed)).toBe(false);
    expect(originAllowed('null', undefined, '127.0.0.1:8080', allowed)).toBe(false);
  });
});

describe('requests', () => {
  const HOST = 'http://127.0.0.1:8080';
  const app = (options: Partial<DashboardOptions> = {}) => {
    const rec = recordingClient();
    return { ...rec, app: createDashboard({ client: rec.client, auth: { token: TOKEN }, ...options }) };
  };

  async function login(dash: ReturnType<typeof createDashboard>): Promise<{ cookie: string; csrf: string }> {
    const res = await dash.request(`${HOST}/dashboard/login`, {
      method: 'POST',
      headers: { origin: HOST, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ password: TOKEN }).toString(),
    });
    expect(res.status).toBe(303);
    const setCookie = res.headers.get('set-cookie')!;
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    expect(setCookie).toMatch(/Path=\/dashboard/);
    const cookie = setCookie.split(';')[0]!;
    const shell = await dash.request(`${HOST}/dashboard/`, { headers: { cookie } });
    const csrf = /name="awa-csrf" content="([^"]+)"/.exec(await shell.text())![1]!;
    return { cookie, csrf };
  }

  it('sends the security headers on every answer, the login page included', async () => {
    const { app: dash } = app();
    for (const path of [
      '/dashboard/login',
      '/dashboard/',
      '/dashboard/api/queues',
      '/dashboard/assets/dashboard.js',
    ]) {
      const res = await dash.request(`${HOST}${path}`);
      const csp = res.headers.get('content-security-policy')!;
      expect(csp, path).toMatch(/script-src 'self'/);
      expect(csp, path).not.toMatch(/unsafe-inline|unsafe-eval/);
      expect(res.headers.get('x-frame-options'), path).toBe('DENY');
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
    }
  });

  it('sends the unauthenticated to the login form (pages) or answers 401 (API)', async () => {
    const { app: dash, calls } = app();
    const page = await dash.request(`${HOST}/dashboard/`);
    expect(page.status).toBe(303);
    expect(page.headers.get('location')).toBe('/dashboard/login');
    expect((await dash.request(`${HOST}/dashboard/api/queues`)).status).toBe(401);
    const wrong = await dash.request(`${HOST}/dashboard/api/queues`, {
      headers: { authorization: 'Bearer nope' },
    });
    expect(wrong.status).toBe(401);
    expect(calls).toEqual([]);
  });

  it('refuses a wrong login with 401 and sets no cookie', async () => {
    const { app: dash } = app();
    const res = await dash.request(`${HOST}/dashboard/login`, {
      method: 'POST',
      headers: { origin: HOST, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'password=wrong-token-0123456789',
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('set-cookie')).toBeNull();
    expect(await res.text()).toMatch(/Wrong credentials/);
  });

  it('refuses a login posted from another origin', async () => {
    const { app: dash } = app();
    const res = await dash.request(`${HOST}/dashboard/login`, {
      method: 'POST',
      headers: { origin: 'https://evil.example', 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ password: TOKEN }).toString(),
    });
    expect(res.status).toBe(403);
    expect(res.headers.get('set-cookie')).toBeNull();
  });

  it('a session action needs the CSRF header and a matching Origin; a bearer action needs neither', async () => {
    const { app: dash, calls } = app();
    const { cookie, csrf } = await login(dash);
    const action = (headers: Record<string, string>) =>
      dash.request(`${HOST}/dashboard/api/queues/mail/pause`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', cookie, ...headers },
        body: '{}',
      });
    expect((await action({ origin: HOST })).status).toBe(403);
    expect((await action({ origin: HOST, [CSRF_HEADER]: 'forged' })).status).toBe(403);
    expect((await action({ origin: 'https://evil.example', [CSRF_HEADER]: csrf })).status).toBe(403);
    expect((await action({ [CSRF_HEADER]: csrf })).status).toBe(403);
    expect(calls).toEqual([]);
    const ok = await action({ origin: HOST, [CSRF_HEADER]: csrf });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ queue: 'mail', paused: true, changed: true });
    const bearer = await dash.request(`${HOST}/dashboard/api/queues/mail/resume`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
      body: '{}',
    });
    expect(bearer.status).toBe(200);
    // Each action names its actor: the logged-in user, from the client's address (none without a socket).
    const actor = '{"actor":{"who":"token","origin":"unknown"}}';
    expect(calls).toEqual([`pauseQueue ["mail",${actor}]`, `resumeQueue ["mail",${actor}]`]);
  });

  it('actions are POST only, with a JSON body', async () => {
    const { app: dash, calls } = app();
    const auth = { authorization: `Bearer ${TOKEN}` };
    expect((await dash.request(`${HOST}/dashboard/api/queues/mail/pause`, { headers: auth })).status).toBe(
      404,
    );
    const form = await dash.request(`${HOST}/dashboard/api/dlq/retry`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'ids=1',
    });
    expect(form.status).toBe(400);
    expect(await form.json()).toMatchObject({ code: 'AWA_INVALID_REQUEST', field: 'content-type' });
    expect(calls).toEqual([]);
  });

  it('logout ends the session', async () => {
    const { app: dash } = app();
    const { cookie } = await login(dash);
    const out = await dash.request(`${HOST}/dashboard/logout`, {
      method: 'POST',
      headers: { cookie, origin: HOST },
    });
    expect(out.status).toBe(303);
    expect((await dash.request(`${HOST}/dashboard/api/queues`, { headers: { cookie } })).status).toBe(401);
  });

  it('open mode answers only to loopback host names (DNS rebinding)', async () => {
    const { app: dash } = app({ auth: false });
    expect((await dash.request('http://127.0.0.1:8080/dashboard/api/queues')).status).toBe(200);
    expect((await dash.request('http://localhost:8080/dashboard/api/queues')).status).toBe(200);
    expect((await dash.request('http://attacker.example:8080/dashboard/api/queues')).status).toBe(403);
  });

  it('answers a bad parameter with 400, its code and its field, before touching the client', async () => {
    const { app: dash, calls } = app();
    const auth = { authorization: `Bearer ${TOKEN}` };
    const cases: [string, string][] = [
      ['/jobs?state=nope', 'state'],
      ['/jobs?state=failed&limit=0', 'limit'],
      ['/jobs?state=failed&limit=5000', 'limit'],
      ['/jobs?state=failed&beforeId=12x', 'beforeId'],
      ['/jobs?state=completed&from=yesterday', 'from'],
      ['/jobs?state=completed&from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z', 'from'],
      ['/jobs?state=failed&sort=asc', 'sort'],
      ['/jobs/abc', 'id'],
      ['/jobs/99999999999999999999', 'id'],
      ['/queues?windowMs=5', 'windowMs'],
    ];
    for (const [path, field] of cases) {
      const res = await dash.request(`${HOST}/dashboard/api${path}`, { headers: auth });
      expect(res.status, path).toBe(400);
      expect(await res.json(), path).toMatchObject({
        error: 'invalid_request',
        code: 'AWA_INVALID_REQUEST',
        field,
      });
    }
    expect(calls).toEqual([]);
  });
});

describe('input validation', () => {
  it('parses a job search', () => {
    expect(jobSearch({ state: 'failed', queue: 'mail', beforeId: '42', limit: '10' })).toEqual({
      state: 'failed',
      queue: 'mail',
      beforeId: '42',
      limit: 10,
    });
    expect(() => jobSearch({ state: 'failed', queue: 'a\u0000b' })).toThrow(InvalidRequestError);
  });

  it('parses id lists and refuses anything else', () => {
    expect(idList({ ids: ['1', '2', '2'] })).toEqual(['1', '2']);
    for (const body of [
      {},
      { ids: [] },
      { ids: [1] },
      { ids: ['-1'] },
      { ids: ['1'], extra: 1 },
      { ids: 'x' },
    ]) {
      expect(() => idList(body as Record<string, unknown>), JSON.stringify(body)).toThrow(
        InvalidRequestError,
      );
    }
    expect(() => idList({ ids: Array.from({ length: 501 }, (_, i) => String(i + 1)) })).toThrow(/1 to 500/);
  });
});

describe('completed-job paging', () => {
  /** A client listing `jobs` as list_jobs() does for completed: newest first, strictly before beforeAt. */
  function historyClient(jobs: { id: string; at: Date }[]): { client: DashboardClient; limits: number[] } {
    const limits: number[] = [];
    const client = {
      listJobs: async (f: { beforeAt?: Date; limit: number }) => {
        limits.push(f.limit);
        return jobs
          .filter((j) => !f.beforeAt || j.at < f.beforeAt)
          .sort((a, b) => b.at.getTime() - a.at.getTime() || Number(b.id) - Number(a.id))
          .slice(0, f.limit)
          .map((j) => ({
            ...j,
            state: 'completed',
            kind: 'k',
            queue: 'q',
            priority: 2,
            attempt: 1,
            maxAttempts: 25,
          }));
      },
    } as unknown as DashboardClient;
    return { client, limits };
  }

  async function walk(client: DashboardClient, limit: number): Promise<{ ids: Set<string>; pages: number }> {
    const ids = new Set<string>();
    let before: Date | undefined;
    for (let pages = 1; pages < 200; pages++) {
      const page = await searchJobs(client, { state: 'completed', limit, before });
      for (const j of page.jobs) ids.add(j.id);
      if (!page.next) return { ids, pages };
      before = new Date((page.next as { before: string }).before);
    }
    throw new Error('paging did not end');
  }

  it('loses no job of a flush cut by a page boundary (flushes of 7 jobs sharing a millisecond, pages of 5)', async () => {
    const t0 = Date.parse('2026-01-01T00:00:00Z');
    const jobs = Array.from({ length: 35 }, (_, i) => ({
      id: String(i + 1),
      at: new Date(t0 + Math.floor(i / 7) * 10),
    }));
    const { client, limits } = historyClient(jobs);
    const { ids, pages } = await walk(client, 5);
    expect([...ids].sort()).toEqual(jobs.map((j) => j.id).sort());
    expect(pages).toBeGreaterThan(1);
    // Pages of a single millisecond were widened to reach an older one.
    expect(limits).toContain(20);
  });

  it('pages by exactly `limit` when every job has its own time', async () => {
    const t0 = Date.parse('2026-01-01T00:00:00Z');
    const jobs = Array.from({ length: 12 }, (_, i) => ({ id: String(i + 1), at: new Date(t0 + i * 10) }));
    const { client, limits } = historyClient(jobs);
    const { ids, pages } = await walk(client, 5);
    expect(ids.size).toBe(12);
    expect(pages).toBe(3);
    expect(new Set(limits)).toEqual(new Set([5]));
  });
});

describe('escaping', () => {
  it('escapes every character that could open markup or leave an attribute', () => {
    expect(escapeHtml(`<script>alert('x')</script>&"\``)).toBe(
      '&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;&#96;',
    );
  });

  it('the shell and login pages carry user-influenced values escaped', () => {
    const shell = shellPage('/dashboard', 'tok"en', '<b>ops</b>', true);
    expect(shell).toContain('content="tok&quot;en"');
    expect(shell).toContain('&lt;b&gt;ops&lt;/b&gt;');
    expect(shell).not.toContain('<b>ops</b>');
    expect(loginPage('/dashboard', 'basic', true)).toMatch(/name="username"/);
    expect(loginPage('/dashboard', 'token', false)).not.toMatch(/name="username"|Wrong credentials/);
  });

  it('the shell carries the job states of src/model, and the page script keeps no list of its own', async () => {
    const shell = shellPage('/dashboard', 'token', 'ops', false);
    expect(/name="awa-job-states" content="([^"]+)"/.exec(shell)![1]!.split(' ')).toEqual([...JOB_STATES]);
    const { readFile } = await import('node:fs/promises');
    const script = await readFile(
      new URL('../../src/http/dashboard/assets/dashboard.js', import.meta.url),
      'utf8',
    );
    expect(script).toMatch(/meta\('awa-job-states'\)/);
    expect(script).not.toMatch(/'waiting_external',\s*\n\s*'completed'/);
  });

  it('the page script builds the DOM with text nodes and never assigns markup', async () => {
    const { readFile } = await import('node:fs/promises');
    const script = await readFile(
      new URL('../../src/http/dashboard/assets/dashboard.js', import.meta.url),
      'utf8',
    );
    expect(script).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/);
    expect(script).toMatch(/createTextNode/);
  });
});
