import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ResolvedAuth } from './config.js';

// Who is asking, and may they act. Credentials are compared in constant time; login sessions live in this
// process's memory (a restart logs everyone out, which is the safe direction); every session has its own CSRF
// token, and basic-auth users get one derived from a per-process secret, because browsers replay basic
// credentials on their own just as they do cookies.

export const SESSION_COOKIE = 'awa_dashboard_session';
export const CSRF_HEADER = 'x-awa-csrf';

/** What a login may do: `operator` reads and acts, `read` reads only (every action answers 403). */
export type Role = 'operator' | 'read';

/** Who logged in, and in which role. */
export interface Login {
  user: string;
  role: Role;
}

/** How a request authenticated. `ambient`: the browser attaches the credential by itself (cookie, basic auth,
 * or none at all), so actions also need the CSRF token and a matching Origin. */
export interface Principal {
  user: string;
  role: Role;
  via: 'bearer' | 'basic' | 'session' | 'open';
  ambient: boolean;
  csrfToken: string | null;
  sessionId: string | null;
}

interface Session {
  user: string;
  role: Role;
  csrfToken: string;
  expiresAt: number;
}

/** Compares two secrets in time independent of where they differ and of their lengths (both are hashed to
 * the same length first). */
export function safeEqual(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given, 'utf8').digest();
  const b = createHash('sha256').update(expected, 'utf8').digest();
  return timingSafeEqual(a, b);
}

const MAX_SESSIONS = 10_000;

export class Authenticator {
  private readonly sessions = new Map<string, Session>();
  private readonly secret = randomBytes(32);

  constructor(
    readonly auth: ResolvedAuth,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Checks what a login form submitted: the token (token mode) or the username and password, against the
   * operator's credential and the read-only one. Both are always compared, so the time taken does not say
   * which one (or which half) was close. */
  checkLogin(username: string, password: string): Login | null {
    if (this.auth.mode === 'token') {
      const operator = safeEqual(password, this.auth.token);
      const reader = safeEqual(password, this.auth.readOnlyToken ?? this.secret.toString('hex'));
      if (operator) return { user: 'token', role: 'operator' };
      return reader && this.auth.readOnlyToken !== undefined
        ? { user: 'read-only token', role: 'read' }
        : null;
    }
    if (this.auth.mode === 'basic') {
      const operator = matches(this.auth, username, password);
      const ro = this.auth.readOnly;
      const reader = matches(
        ro ?? { username: '', password: this.secret.toString('hex') },
        username,
        password,
      );
      if (operator) return { user: this.auth.username, role: 'operator' };
      return reader && ro ? { user: ro.username, role: 'read' } : null;
    }
    return { user: 'anonymous', role: 'operator' };
  }

  /** The principal of a request, from its Authorization header or session cookie; null when it has none
   * that holds. */
  identify(authorization: string | undefined, sessionId: string | undefined): Principal | null {
    if (this.auth.mode === 'open') {
      return {
        user: 'anonymous',
        role: 'operator',
        via: 'open',
        ambient: true,
        csrfToken: this.derivedCsrf('open'),
        sessionId: null,
      };
    }
    if (authorization !== undefined) return this.fromHeader(authorization);
    if (sessionId !== undefined) return this.fromSession(sessionId);
    return null;
  }

  /** Starts a session for a user who logged in; returns its id (the cookie value). */
  startSession(user: string, role: Role = 'operator'): string {
    this.sweep();
    if (this.sessions.size >= MAX_SESSIONS) {
      // Maps iterate in insertion order: the first entry is the oldest session.
      const oldest = this.sessions.keys().next().value;
      if (oldest !== undefined) this.sessions.delete(oldest);
    }
    const id = randomBytes(32).toString('base64url');
    this.sessions.set(id, {
      user,
      role,
      csrfToken: randomBytes(24).toString('base64url'),
      expiresAt: this.now() + this.ttlMs,
    });
    return id;
  }

  endSession(id: string): void {
    this.sessions.delete(id);
  }

  private fromHeader(header: string): Principal | null {
    const space = header.indexOf(' ');
    const scheme = header.slice(0, space).toLowerCase();
    const value = header.slice(space + 1).trim();
    if (space <= 0 || value === '') return null;
    if (scheme === 'bearer' && this.auth.mode === 'token') {
      // A header the page never sends by itself: no CSRF token needed.
      const login = this.checkLogin('', value);
      if (login === null) return null;
      return { ...login, via: 'bearer', ambient: false, csrfToken: null, sessionId: null };
    }
    if (scheme === 'basic' && this.auth.mode === 'basic') {
      const decoded = Buffer.from(value, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon < 0) return null;
      const login = this.checkLogin(decoded.slice(0, colon), decoded.slice(colon + 1));
      if (login === null) return null;
      return {
        ...login,
        via: 'basic',
        ambient: true,
        csrfToken: this.derivedCsrf(`basic:${login.user}`),
        sessionId: null,
      };
    }
    return null;
  }

  private fromSession(id: string): Principal | null {
    const session = this.sessions.get(id);
    if (!session) return null;
    if (session.expiresAt <= this.now()) {
      this.sessions.delete(id);
      return null;
    }
    return {
      user: session.user,
      role: session.role,
      via: 'session',
      ambient: true,
      csrfToken: session.csrfToken,
      sessionId: id,
    };
  }

  private derivedCsrf(subject: string): string {
    return createHmac('sha256', this.secret).update(subject).digest('base64url');
  }

  private sweep(): void {
    const now = this.now();
    for (const [id, s] of this.sessions) if (s.expiresAt <= now) this.sessions.delete(id);
  }
}

/** The user an Authorization header claims to be, for the record of a failed login: the basic username (never
 * the password), or 'token' for a bearer token. */
export function claimedUser(header: string): string {
  const space = header.indexOf(' ');
  if (header.slice(0, space).toLowerCase() !== 'basic') return 'token';
  const decoded = Buffer.from(header.slice(space + 1).trim(), 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? '(malformed)' : decoded.slice(0, colon);
}

/** Both halves compared, always. */
function matches(
  expected: { username: string; password: string },
  username: string,
  password: string,
): boolean {
  const userOk = safeEqual(username, expected.username);
  const passOk = safeEqual(password, expected.password);
  return userOk && passOk;
}

/** Whether a request's Origin (or, lacking one, its Referer) is the dashboard's own host or an allowed origin.
 * Requests that name neither are refused: every browser that could be tricked into a cross-site POST sends
 * Origin with it. */
export function originAllowed(
  origin: string | undefined,
  referer: string | undefined,
  host: string | undefined,
  allowed: ReadonlySet<string>,
): boolean {
  let source = origin;
  if (source === undefined && referer !== undefined) {
    try {
      source = new URL(referer).origin;
    } catch {
      return false;
    }
  }
  if (source === undefined || source === 'null') return false;
  if (allowed.has(source)) return true;
  if (host === undefined) return false;
  try {
    return new URL(source).host === host.toLowerCase();
  } catch {
    return false;
  }
}
