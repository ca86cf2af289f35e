import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { AwaError, InvalidRequestError, UnknownQueueError } from '../../model/errors.js';
import { auditSafe, type Actor } from '../../model/audit.js';
import { readLimited } from '../../model/limited-body.js';
import { clientAddress } from './address.js';
import { createApi } from './api.js';
import { asset } from './assets.js';
import {
  Authenticator,
  claimedUser,
  CSRF_HEADER,
  originAllowed,
  safeEqual,
  SESSION_COOKIE,
  type Login,
  type Principal,
} from './auth.js';
import { isLoopback, resolveDashboardConfig, type DashboardConfig, type DashboardOptions } from './config.js';
import { SECURITY_HEADERS } from './headers.js';
import { loginPage, shellPage } from './pages.js';
import { LoginThrottle } from './throttle.js';

// The dashboard: a Hono app under its base path with
//   GET  /assets/:file        the script and stylesheet (public: they hold no data)
//   GET  /login, POST /login  the login form; success sets an HttpOnly, SameSite=Strict session cookie
//   POST /logout              ends the session
//   GET  /                    the page shell (needs a login)
//   /api/*                    the JSON API (needs a login; POSTs need the CSRF header and a matching Origin
//                             unless they carry a bearer token, which no browser attaches by itself)
// Every answer carries the security headers of headers.ts. Credentials (the login form, a bearer token, basic
// credentials) are throttled per client address (throttle.ts); logins and failed logins are recorded in the
// audit trail, and every action is recorded as the logged-in user from the client's address. A read-only login
// gets 403 on every action.

type Env = { Variables: { principal: Principal; actor: Actor } };

const MAX_LOGIN_BODY = 4096;

/** Builds the dashboard. Throws DashboardConfigError (code AWA_INVALID_CONFIG) naming the field when the
 * options are incomplete or unsafe. */
export function createDashboard(options: DashboardOptions): Hono {
  const config = resolveDashboardConfig(options);
  const auth = new Authenticator(config.auth, config.sessionTtlMs);
  const base = config.basePath;
  const replicaReads = config.client.readsFrom === 'replica';
  // Paths are written out with the base rather than through basePath(), so they survive being mounted into
  // another app (createHttpApp) unchanged.
  const app = new Hono<Env>();
  const at = (path: string) => `${base}${path}`;
  const home = base === '' ? '/' : `${base}/`;
  // Path=/dashboard covers /dashboard and everything below it, and nothing else on the server.
  const cookiePath = base === '' ? '/' : base;
  const throttle = new LoginThrottle();
  const addressOf = (c: Context) => clientAddress(c, config.trustedProxies);

  /** Records a login or a failed one (the name tried, never the password), and counts it for throttling. */
  const recordLogin = async (c: Context, login: Login | null, tried: string, via: string) => {
    const address = addressOf(c);
    const lockedForSeconds = login ? 0 : throttle.failed(address);
    if (login) throttle.succeeded(address);
    await config.client.recordAudit(
      {
        action: login ? 'dashboard.login' : 'dashboard.login_failed',
        detail: {
          via,
          ...(login ? { role: login.role } : {}),
          ...(lockedForSeconds ? { lockedForSeconds } : {}),
        },
      },
      { actor: { who: auditSafe(login?.user ?? tried), origin: address } },
    );
  };
  /** 429 while the client's address is locked out: its credentials are not even checked. */
  const throttled = (c: Context, json: boolean): Response | null => {
    const wait = throttle.retryAfterSeconds(addressOf(c));
    if (wait === 0) return null;
    const message = `too many failed logins from this address: try again in ${wait} s`;
    c.header('Retry-After', String(wait));
    return json
      ? c.json({ error: 'too_many_attempts', message, retryAfterSeconds: wait }, 429)
      : c.text(message, 429);
  };

  const guard: MiddlewareHandler<Env> = async (c, next) => {
    if (config.loopbackOnly && !isLoopback(new URL(c.req.url).hostname)) {
      // Open mode answers only to names of this machine: a page on another site cannot reach it by DNS rebinding.
      return c.text(
        'forbidden: this dashboard runs without authentication and answers on loopback only',
        403,
      );
    }
    await next();
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) c.res.headers.set(k, v);
  };
  if (base !== '') app.use(base, guard);
  app.use(at('/*'), guard);
  app.onError((err, c) => answerError(err, c, config));

  app.get(at('/assets/:file'), (c) => {
    const found = asset(c.req.param('file') ?? '');
    if (!found) return c.text('not found', 404);
    return c.body(found.body, 200, { 'Content-Type': found.type });
  });

  app.get(at('/login'), (c) => {
    if (config.auth.mode === 'open') return c.redirect(home, 303);
    return c.html(loginPage(base, config.auth.mode, false));
  });

  app.post(at('/login'), async (c) => {
    if (config.auth.mode === 'open') return c.redirect(home, 303);
    if (!sameOrigin(c, config)) return c.text('forbidden: cross-origin login', 403);
    const bytes = await readLimited(c.req.raw.body, MAX_LOGIN_BODY, 'release');
    const form = new URLSearchParams(bytes ? new TextDecoder().decode(bytes) : '');
    const limited = throttled(c, false);
    if (limited) return limited;
    const tried = config.auth.mode === 'token' ? 'token' : (form.get('username') ?? '');
    const login = auth.checkLogin(form.get('username') ?? '', form.get('password') ?? '');
    await recordLogin(c, login, tried, 'form');
    if (login === null) return c.html(loginPage(base, config.auth.mode, true), 401);
    setCookie(c, SESSION_COOKIE, auth.startSession(login.user, login.role), {
      path: cookiePath,
      httpOnly: true,
      sameSite: 'Strict',
      secure: config.secureCookie,
      maxAge: Math.floor(config.sessionTtlMs / 1000),
    });
    return c.redirect(home, 303);
  });

  app.post(at('/logout'), (c) => {
    if (!sameOrigin(c, config)) return c.text('forbidden: cross-origin logout', 403);
    const id = getCookie(c, SESSION_COOKIE);
    if (id !== undefined) auth.endSession(id);
    deleteCookie(c, SESSION_COOKIE, { path: cookiePath });
    return c.redirect(`${base}/login`, 303);
  });

  const requireLogin: MiddlewareHandler<Env> = async (c, next) => {
    const authorization = config.auth.mode === 'open' ? undefined : c.req.header('authorization');
    const isApi = c.req.path.startsWith(`${base}/api`);
    if (authorization !== undefined) {
      const limited = throttled(c, isApi);
      if (limited) return limited;
    }
    const principal = auth.identify(authorization, getCookie(c, SESSION_COOKIE));
    // Credentials sent with every request (bearer, basic) are a login each: a wrong one counts and is
    // recorded; a right one clears the address's failures but is not recorded (it would be every request).
    if (authorization !== undefined) {
      if (principal?.via === 'bearer' || principal?.via === 'basic') throttle.succeeded(addressOf(c));
      else await recordLogin(c, null, claimedUser(authorization), authorization.split(' ')[0]!.toLowerCase());
    }
    if (!principal) {
      if (isApi) return c.json({ error: 'unauthorized' }, 401);
      return c.redirect(`${base}/login`, 303);
    }
    const acting = c.req.method !== 'GET' && c.req.method !== 'HEAD';
    if (acting && principal.role === 'read') {
      return c.json({ error: 'forbidden', message: 'this login is read-only: it may look but not act' }, 403);
    }
    if (acting && principal.ambient) {
      if (!sameOrigin(c, config)) return c.json({ error: 'forbidden', message: 'cross-origin request' }, 403);
      const token = c.req.header(CSRF_HEADER);
      if (token === undefined || principal.csrfToken === null || !safeEqual(token, principal.csrfToken)) {
        return c.json({ error: 'forbidden', message: `missing or wrong ${CSRF_HEADER} header` }, 403);
      }
    }
    c.set('principal', principal);
    c.set('actor', { who: auditSafe(principal.user), origin: addressOf(c) });
    await next();
  };

  const shellPaths = base === '' ? ['/'] : [base, `${base}/`];
  for (const path of shellPaths) {
    app.get(path, requireLogin, (c) => {
      const p = c.get('principal');
      return c.html(
        shellPage(base, p.csrfToken ?? '', p.user, p.via === 'session', p.role === 'read', replicaReads),
      );
    });
  }
  app.use(at('/api/*'), requireLogin);
  app.get(at('/api/session'), (c) => {
    const p = c.get('principal');
    return c.json({ user: p.user, role: p.role, via: p.via, csrfToken: p.csrfToken });
  });
  const api = createApi(config.client);
  api.onError((err, c) => answerError(err, c, config));
  app.route(at('/api'), api);
  return app as unknown as Hono;
}

function sameOrigin(c: Context, config: DashboardConfig): boolean {
  // The request URL's host is the Host header's (the Node adapter builds the URL from it).
  const host = new URL(c.req.url).host;
  return originAllowed(c.req.header('origin'), c.req.header('referer'), host, config.allowedOrigins);
}

/** The caller's mistakes answer 400 with the error's code and field, a queue nothing names 404; anything else is
 * ours: 500, reported. */
function answerError(err: Error, c: Context, config: DashboardConfig): Response {
  if (err instanceof UnknownQueueError) {
    return c.json({ error: 'not_found', code: err.code, message: err.message }, 404);
  }
  if (err instanceof InvalidRequestError) {
    return c.json({ error: 'invalid_request', code: err.code, field: err.field, message: err.message }, 400);
  }
  if (err instanceof AwaError && err.code === 'AWA_INVALID_OPTION') {
    const field = (err as AwaError & { field?: string }).field;
    return c.json({ error: 'invalid_request', code: err.code, field, message: err.message }, 400);
  }
  config.onError(err);
  return c.json({ error: 'internal' }, 500);
}
