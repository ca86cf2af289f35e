import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ResolvedAuth } from './config.js';

// Who is asking, and may they act. Credentials are compared in constant time; login sessions live in this
// process's memory (a restart logs everyone out, which is the safe direction); every session has its own CSRF
// token, and basic-auth users get one derived from a per-process secret, because browsers replay basic
// credentials on their own just as they do cookies.

export const SESSION_COOKIE = 'awa_dashboard_session';
export const CSRF_HEADER = 'x-awa-csrf';

/** How a request authenticated. `ambient`: the browser attaches the credential by itself (cookie, basic auth,
 * or none at all), so actions also need the CSRF token and a matching Origin. */
export interface Principal {
  user: string;
  via: 'bearer' | 'basic' | 'session' | 'open';
  ambient: boolean;
  csrfToken: string | null;
  sessionId: string | null;
}

interface Session {
  user: string;
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

  /** Checks what a login form submitted: the token (token mode) or the username and password. */
  checkLogin(username: string, password: string): string | null {
    if (this.auth.mode === 'token') return safeEqual(password, this.auth.token) ? 'token' : null;
    if (this.auth.mode === 'basic') {
      // Both compared, always, so the time taken does not say which was wrong.
      const userOk = safeEqual(username, this.auth.username);
      const passOk = safeEqual(password, this.auth.password);
      return userOk && passOk ? this.auth.username : null;
    }
    return 'anonymous';
  }

  /** The principal of a request, from its Authorization header or session cookie; null when it has none
   * that holds. */
  identify(authorization: string | undefined, sessionId: string | undefined): Principal | null {
    if (this.auth.mode === 'open') {
      return {
        user: 'anonymous',
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
  startSession(user: string): string {
    this.sweep();
    if (this.sessions.size >= MAX_SESSIONS) {
      // Maps iterate in insertion order: the first entry is the oldest session.
      const oldest = this.sessions.keys().next().value;
      if (oldest !== undefined) this.sessions.delete(oldest);
    }
    const id = randomBytes(32).toString('base64url');
    this.sessions.set(id, {
      user,
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
      if (!safeEqual(value, this.auth.token)) return null;
      return { user: 'token', via: 'bearer', ambient: false, csrfToken: null, sessionId: null };
    }
    if (scheme === 'basic' && this.auth.mode === 'basic') {
      const decoded = Buffer.from(value, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon < 0) return null;
      const user = this.checkLogin(decoded.slice(0, colon), decoded.slice(colon + 1));
      if (user === null) return null;
      return {
        user,
        via: 'basic',
        ambient: true,
        csrfToken: this.derivedCsrf(`basic:${user}`),
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
    return { user: session.user, via: 'session', ambient: true, csrfToken: session.csrfToken, sessionId: id };
  }

  private derivedCsrf(subject: string): string {
    return createHmac('sha256', this.secret).update(subject).digest('base64url');
  }

  private sweep(): void {
    const now = this.now();
    for (const [id, s] of this.sessions) if (s.expiresAt <= now) this.sessions.delete(id);
  }
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
