import { spawn, type ChildProcess } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  createDashboard,
  startDashboard,
  type AuditRecord,
  type RunningServer,
} from '../../src/index.js';
import { PLAIN_HTTP_WARNING } from '../../src/cli/commands/serve.js';
import { LOGIN_FAILURE_LIMIT } from '../../src/http/dashboard/throttle.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// The dashboard's roles, login throttling and audit records over real HTTP against a real database: logins and
// failed logins are recorded (the name tried, never the password) from the socket's address; an address that
// failed too often gets 429 while another does not; a read-only login reads every API route and is refused
// every action; `awa serve` warns when sessions would travel over plain HTTP, and --secure-cookie marks them.

const OPS = { username: 'ops', password: 'operator-password-1' };
const VIEWER = { username: 'viewer', password: 'viewer-password-22' };

let db: TestDatabase;
let client: AwaClient;
let server: RunningServer;
const logged: AuditRecord[] = [];
let jobId: string;
let flowId: string;

beforeAll(async () => {
  db = await createTestDatabase('dashboard_roles');
  client = new AwaClient({ connectionString: db.url, poolSize: 4, onAudit: (r) => logged.push(r) });
  await client.migrate();
  jobId = (await client.enqueue('roles_kind', { n: 1 }, { queue: 'rq' })).id;
  flowId = (
    await client.enqueueFlow({
      jobs: [{ name: 'only', kind: 'roles_kind', args: {}, options: { queue: 'rq_flow' } }],
    })
  ).flowId;
  server = await startDashboard({ client, auth: OPS, readOnly: VIEWER, port: 0 });
});
afterAll(async () => {
  await server?.close();
  await client?.close();
  await db?.drop();
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** One request to the server from the local address `from` (any 127.x.y.z is this machine). */
function send(
  method: string,
  path: string,
  options: { from?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  const url = new URL(path, server.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      { method, headers: options.headers ?? {}, localAddress: options.from ?? '127.0.0.1' },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

function login(user: { username: string; password: string }, from = '127.0.0.1'): Promise<Answer> {
  return send('POST', '/dashboard/login', {
    from,
    headers: { origin: server.url, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(user).toString(),
  });
}

/** A logged-in browser: its cookie and the CSRF token the shell page carries. */
async function session(
  user: { username: string; password: string },
  from = '127.0.0.1',
): Promise<{ cookie: string; csrf: string; shell: string; from: string }> {
  const res = await login(user, from);
  expect(res.status).toBe(303);
  const cookie = String(res.headers['set-cookie']).split(';')[0]!;
  const shell = (await send('GET', '/dashboard/', { from, headers: { cookie } })).text;
  const csrf = /name="awa-csrf" content="([^"]+)"/.exec(shell)![1]!;
  return { cookie, csrf, shell, from };
}

function act(s: { cookie: string; csrf: string; from: string }, path: string, body: unknown = {}) {
  return send('POST', path, {
    from: s.from,
    headers: {
      cookie: s.cookie,
      'x-awa-csrf': s.csrf,
      origin: server.url,
      'content-type': 'application/json',
    },
    body: JSON.stringify(body),
  });
}

async function newest(action?: string): Promise<AuditRecord | undefined> {
  return (await client.auditLog({ limit: 1, ...(action ? { action } : {}) }))[0];
}

/** The API routes of a given method, their parameters filled in (each alternative of `{a|b}` once). */
function apiRoutes(method: 'GET' | 'POST'): string[] {
  const app = createDashboard({ client, auth: OPS, readOnly: VIEWER });
  const params: Record<string, string> = { queue: 'rq', id: jobId };
  // A flow's routes take a flow's id.
  const valueOf = (path: string, name: string) =>
    path.startsWith('/dashboard/api/flows/') && name === 'id' ? flowId : params[name];
  const paths = app.routes
    .filter((r) => r.method === method && r.path.startsWith('/dashboard/api/'))
    .map((r) => r.path);
  return [...new Set(paths)].flatMap((p) => {
    let out = [p];
    for (const m of p.matchAll(/:(\w+)\{([^}]+)\}/g)) {
      out = out.flatMap((x) => m[2]!.split('|').map((alt) => x.replace(m[0], alt)));
    }
    return out.map((x) =>
      x.replace(/:(\w+)/g, (_, name: string) => {
        const value = valueOf(p, name);
        if (value === undefined) throw new Error(`no test value for :${name} in ${p}`);
        return value;
      }),
    );
  });
}

describe('logins in the audit trail', () => {
  it('records a failed login with the name tried (never the password) and a login, from the socket address', async () => {
    const wrong = await login({ username: 'ops', password: 'not-the-password' }, '127.0.0.4');
    expect(wrong.status).toBe(401);
    expect(await newest()).toMatchObject({
      actor: 'ops',
      origin: '127.0.0.4',
      action: 'dashboard.login_failed',
      target: null,
      detail: { via: 'form' },
    });
    expect((await login(OPS, '127.0.0.4')).status).toBe(303);
    expect(await newest()).toMatchObject({
      actor: 'ops',
      origin: '127.0.0.4',
      action: 'dashboard.login',
      detail: { via: 'form', role: 'operator' },
    });
    // Wrong basic credentials sent with a request are a failed login too.
    const basic = `Basic ${Buffer.from('mallory:guess-guess').toString('base64')}`;
    const api = await send('GET', '/dashboard/api/queues', {
      from: '127.0.0.4',
      headers: { authorization: basic },
    });
    expect(api.status).toBe(401);
    expect(await newest()).toMatchObject({
      actor: 'mallory',
      action: 'dashboard.login_failed',
      detail: { via: 'basic' },
    });
    const everything = JSON.stringify(await client.auditLog({ limit: 1000 }));
    expect(everything).not.toContain('not-the-password');
    expect(everything).not.toContain('guess-guess');
    expect(logged.at(-1)).toEqual(await newest());
  });

  it('records an action as the logged-in user from the client address', async () => {
    const s = await session(OPS, '127.0.0.5');
    const res = await act(s, '/dashboard/api/queues/rq/pause');
    expect(res.status).toBe(200);
    expect(await newest()).toMatchObject({
      actor: 'ops',
      origin: '127.0.0.5',
      action: 'queue.pause',
      target: 'rq',
      detail: { changed: true },
    });
    expect((await act(s, '/dashboard/api/queues/rq/resume')).status).toBe(200);
    const page = JSON.parse(
      (
        await send('GET', '/dashboard/api/audit?action=queue.pause', {
          from: s.from,
          headers: { cookie: s.cookie },
        })
      ).text,
    );
    expect(page.records[0]).toMatchObject({ actor: 'ops', origin: '127.0.0.5', action: 'queue.pause' });
  });
});

describe('login throttling', () => {
  it(`refuses an address with 429 and Retry-After after ${LOGIN_FAILURE_LIMIT} failures, not another one`, async () => {
    const attacker = '127.0.0.2';
    for (let i = 0; i < LOGIN_FAILURE_LIMIT; i++) {
      expect((await login({ ...OPS, password: `wrong-${i}-password` }, attacker)).status).toBe(401);
    }
    // Locked out: even the right password is not checked.
    const refused = await login(OPS, attacker);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    const bearer = await send('GET', '/dashboard/api/queues', {
      from: attacker,
      headers: {
        authorization: `Basic ${Buffer.from(`${OPS.username}:${OPS.password}`).toString('base64')}`,
      },
    });
    expect(bearer.status).toBe(429);
    expect(JSON.parse(bearer.text)).toMatchObject({ error: 'too_many_attempts' });
    // The failure that started the lockout says so.
    expect(await newest('dashboard.login_failed')).toMatchObject({
      origin: attacker,
      detail: { via: 'form', lockedForSeconds: 60 },
    });
    // Another address is not affected.
    expect((await login({ ...OPS, password: 'wrong-elsewhere' }, '127.0.0.3')).status).toBe(401);
    expect((await login(OPS, '127.0.0.3')).status).toBe(303);
  });

  it('a success clears the failures of its address', async () => {
    const from = '127.0.0.6';
    for (let i = 0; i < LOGIN_FAILURE_LIMIT - 1; i++) {
      expect((await login({ ...OPS, password: `wrong-${i}-password` }, from)).status).toBe(401);
    }
    expect((await login(OPS, from)).status).toBe(303);
    for (let i = 0; i < LOGIN_FAILURE_LIMIT - 1; i++) {
      expect((await login({ ...OPS, password: `again-${i}-password` }, from)).status).toBe(401);
    }
    expect((await login(OPS, from)).status).toBe(303);
  });
});

describe('the read-only role', () => {
  it('is refused every action with 403, and the action does not happen', async () => {
    const viewer = await session(VIEWER, '127.0.0.7');
    const operator = await session(OPS, '127.0.0.7');
    const posts = apiRoutes('POST');
    expect(posts).toEqual(
      expect.arrayContaining([
        '/dashboard/api/queues/rq/pause',
        '/dashboard/api/queues/rq/resume',
        `/dashboard/api/jobs/${jobId}/cancel`,
        `/dashboard/api/jobs/${jobId}/retry`,
        '/dashboard/api/dlq/retry',
        '/dashboard/api/dlq/purge',
      ]),
    );
    const body = (path: string) => (path.includes('/dlq/') ? { ids: [jobId] } : {});
    for (const path of posts) {
      const before = (await client.auditLog({ limit: 1 }))[0]?.id;
      const res = await act(viewer, path, body(path));
      expect(res.status, path).toBe(403);
      expect(JSON.parse(res.text), path).toMatchObject({ error: 'forbidden', message: /read-only/ });
      expect((await client.auditLog({ limit: 1 }))[0]?.id, path).toBe(before);
    }
    expect((await client.getJob(jobId))?.state).toBe('available');
    expect((await client.queueHealth()).find((q) => q.queue === 'rq')?.paused).toBe(false);
    // The same request from an operator's session acts: the 403 was the role's.
    expect((await act(operator, '/dashboard/api/queues/rq/pause')).status).toBe(200);
    expect((await act(operator, '/dashboard/api/queues/rq/resume')).status).toBe(200);
  });

  it('reads every page and API route, and its page shows no action controls', async () => {
    const viewer = await session(VIEWER, '127.0.0.8');
    expect(await newest('dashboard.login')).toMatchObject({ actor: 'viewer', detail: { role: 'read' } });
    const gets = apiRoutes('GET');
    expect(gets).toEqual(expect.arrayContaining(['/dashboard/api/queues', '/dashboard/api/audit']));
    for (const path of gets) {
      const res = await send('GET', path, { from: viewer.from, headers: { cookie: viewer.cookie } });
      expect(res.status, path).toBe(200);
    }
    expect(
      JSON.parse(
        (
          await send('GET', '/dashboard/api/session', {
            from: viewer.from,
            headers: { cookie: viewer.cookie },
          })
        ).text,
      ),
    ).toMatchObject({ user: 'viewer', role: 'read' });
    expect(viewer.shell).toMatch(/<body data-role="read">/);
    expect(viewer.shell).toMatch(/viewer \(read-only\)/);
    const css = (await send('GET', '/dashboard/assets/dashboard.css')).text;
    expect(css).toMatch(
      /body\[data-role='read'\] \.actions,\s*body\[data-role='read'\] \[data-action\] \{\s*display: none/,
    );
    const operator = await session(OPS, '127.0.0.8');
    expect(operator.shell).toMatch(/<body data-role="operator">/);
  });
});

describe('awa serve and plain HTTP', () => {
  const ROOT = fileURLToPath(new URL('../../', import.meta.url));
  const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
  const TOKEN = 'roles-serve-token-0123456789';

  function serve(args: string[]): { child: ChildProcess; err: () => string; exit: Promise<number | null> } {
    const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: db.url, AWA_DASHBOARD_TOKEN: TOKEN };
    delete env.AWA_CALLBACK_SECRET;
    const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'serve', '--port', '0', ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const exit = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    return { child, err: () => err, exit };
  }

  const port = (err: string) => /serving on http:\/\/\S+:(\d+):/.exec(err)?.[1];

  it('warns once on a non-loopback address without --secure-cookie', async () => {
    const run = serve(['--host', '0.0.0.0']);
    await until('the server to listen', async () => port(run.err()));
    run.child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
    const warnings = run
      .err()
      .split('\n')
      .filter((l) => l.includes('warning'));
    expect(warnings).toEqual([`[awa] warning: the dashboard is served on 0.0.0.0: ${PLAIN_HTTP_WARNING}`]);
  });

  it('with --secure-cookie: no warning, a Secure session cookie, and the login in its log', async () => {
    const run = serve(['--host', '0.0.0.0', '--secure-cookie']);
    const p = await until('the server to listen', async () => port(run.err()));
    const base = `http://127.0.0.1:${p}`;
    const res = await fetch(`${base}/dashboard/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { origin: base, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ password: TOKEN }).toString(),
    });
    expect(res.status).toBe(303);
    expect(res.headers.get('set-cookie')).toMatch(/; Secure/);
    const line = await until('the audit line', async () =>
      run
        .err()
        .split('\n')
        .find((l) => l.startsWith('[awa] audit ')),
    );
    expect(JSON.parse(line.slice('[awa] audit '.length))).toMatchObject({
      actor: 'token',
      origin: '127.0.0.1',
      action: 'dashboard.login',
    });
    run.child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
    expect(run.err()).not.toMatch(/warning/);
  });
});
