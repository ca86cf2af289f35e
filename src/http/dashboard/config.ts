import { isIP } from 'node:net';
import { DashboardConfigError } from '../../model/errors.js';
import type { AwaClient } from '../../roles.js';
import { proxyAddress } from './address.js';

// The dashboard's options, validated once when it is built: every problem names the field (or environment
// variable) to fix, and an unsafe combination (no credentials, or open on a public address) refuses to start.

/** The AwaClient methods the dashboard reads and acts through (and, when it has it, where its reads go: the
 * page polls how far behind a replica is only when they go to one). */
export type DashboardClient = Partial<Pick<AwaClient, 'readsFrom'>> &
  Pick<
    AwaClient,
    | 'queueHealth'
    | 'listJobs'
    | 'compactHistorySpan'
    | 'getJob'
    | 'jobProgress'
    | 'cancel'
    | 'retryJob'
    | 'retryDlq'
    | 'purgeDlq'
    | 'dlqPage'
    | 'countDlq'
    | 'pauseQueue'
    | 'resumeQueue'
    | 'recordAudit'
    | 'auditLog'
    | 'runtimeList'
    | 'listCron'
    | 'ringStatus'
    | 'storageStatus'
    | 'readLag'
    | 'listFlows'
    | 'getFlow'
    | 'cancelFlow'
    | 'queueLimits'
    | 'setQueueLimits'
  >;

/** A bearer token, a username and password, or (only on a loopback address, or with `insecure`) none. */
export type DashboardAuth = { token: string } | { username: string; password: string } | false;

export interface DashboardOptions {
  client: DashboardClient;
  /** Default: $AWA_DASHBOARD_TOKEN, else $AWA_DASHBOARD_USER with $AWA_DASHBOARD_PASSWORD; none is an error. */
  auth?: DashboardAuth;
  /** The address the server binds (default 127.0.0.1): `auth: false` is refused unless it is loopback. */
  host?: string;
  /** Allows `auth: false` on a non-loopback address. Anyone who reaches the port can then act on jobs. */
  insecure?: boolean;
  /** Where the dashboard lives on its server. Default /dashboard. */
  basePath?: string;
  /** Origins (scheme://host[:port]) besides the request's own host from which actions are accepted, e.g. the
   * public origin of a proxy that rewrites Host. */
  allowedOrigins?: readonly string[];
  /** How long a login session lasts. Default 12 h. */
  sessionTtlMs?: number;
  /** Marks the session cookie Secure (set it when users reach the dashboard over HTTPS). Default false. */
  secureCookie?: boolean;
  /** A second credential, of the same kind as `auth`, that may read every page and API but act on nothing
   * (403 on every action). Default: $AWA_DASHBOARD_READONLY_TOKEN (token mode), or
   * $AWA_DASHBOARD_READONLY_USER with $AWA_DASHBOARD_READONLY_PASSWORD (username mode); none: no such role. */
  readOnly?: { token: string } | { username: string; password: string };
  /** Addresses of proxies in front whose X-Forwarded-For is believed for the client's address (the audit
   * trail's origin, login throttling). Default none: the address the connection comes from. */
  trustedProxies?: readonly string[];
  /** Where the credential fallbacks are read. Default process.env. */
  env?: Readonly<Record<string, string | undefined>>;
  /** Failures that are not the caller's (the database is down…); they answer 500. Default: stderr. */
  onError?: (err: unknown) => void;
}

/** The credentials; `readOnly*`, when set, is the read-only role's (see DashboardOptions.readOnly). */
export type ResolvedAuth =
  | { mode: 'token'; token: string; readOnlyToken?: string }
  | { mode: 'basic'; username: string; password: string; readOnly?: { username: string; password: string } }
  | { mode: 'open' };

export interface DashboardConfig {
  client: DashboardClient;
  auth: ResolvedAuth;
  /** '' for the server's root, else '/name' without a trailing slash. */
  basePath: string;
  allowedOrigins: ReadonlySet<string>;
  sessionTtlMs: number;
  secureCookie: boolean;
  trustedProxies: ReadonlySet<string>;
  /** Open mode without `insecure`: requests must name a loopback host (a DNS-rebinding guard). */
  loopbackOnly: boolean;
  onError: (err: unknown) => void;
}

const KEYS = [
  'client',
  'auth',
  'host',
  'insecure',
  'basePath',
  'allowedOrigins',
  'sessionTtlMs',
  'secureCookie',
  'readOnly',
  'trustedProxies',
  'env',
  'onError',
] as const;
const CLIENT_METHODS = [
  'queueHealth',
  'listJobs',
  'compactHistorySpan',
  'getJob',
  'jobProgress',
  'cancel',
  'retryJob',
  'retryDlq',
  'purgeDlq',
  'dlqPage',
  'countDlq',
  'pauseQueue',
  'resumeQueue',
  'recordAudit',
  'auditLog',
  'runtimeList',
  'listCron',
  'ringStatus',
  'storageStatus',
  'readLag',
  'listFlows',
  'getFlow',
  'cancelFlow',
  'queueLimits',
  'setQueueLimits',
] as const;
export const MIN_TOKEN_CHARS = 16;
export const MIN_PASSWORD_CHARS = 8;
const DAY_MS = 86_400_000;

export function resolveDashboardConfig(options: DashboardOptions): DashboardConfig {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new DashboardConfigError('options', 'must be an object { client, auth?, … }');
  }
  for (const key of Object.keys(options)) {
    if (!(KEYS as readonly string[]).includes(key)) {
      throw new DashboardConfigError(key, `is not a dashboard option (known: ${KEYS.join(', ')})`);
    }
  }
  const client = options.client as unknown as Record<string, unknown> | undefined;
  if (!client || CLIENT_METHODS.some((m) => typeof client[m] !== 'function')) {
    throw new DashboardConfigError('client', 'must be an AwaClient');
  }
  const host = options.host === undefined ? '127.0.0.1' : options.host;
  if (typeof host !== 'string' || host.length === 0) {
    throw new DashboardConfigError('host', 'must be the address the server binds, e.g. 127.0.0.1');
  }
  const insecure = flag('insecure', options.insecure);
  const env = options.env ?? process.env;
  const auth = withReadOnly(resolveAuth(options.auth, env), options.readOnly, env);
  if (auth.mode === 'open' && !isLoopback(host) && !insecure) {
    throw new DashboardConfigError(
      'auth',
      `false (no authentication) is refused on ${host}, which is not a loopback address: give credentials, bind 127.0.0.1, or pass insecure: true if something in front authenticates`,
    );
  }
  return {
    client: options.client,
    auth,
    basePath: resolveBasePath(options.basePath),
    allowedOrigins: new Set(resolveOrigins(options.allowedOrigins)),
    sessionTtlMs: options.sessionTtlMs === undefined ? DAY_MS / 2 : ttl(options.sessionTtlMs),
    secureCookie: flag('secureCookie', options.secureCookie),
    trustedProxies: new Set(resolveProxies(options.trustedProxies)),
    loopbackOnly: auth.mode === 'open' && !insecure,
    onError:
      options.onError ??
      ((err: unknown) =>
        console.error(`[awa] dashboard: ${err instanceof Error ? err.message : String(err)}`)),
  };
}

function resolveAuth(auth: unknown, env: Readonly<Record<string, string | undefined>>): ResolvedAuth {
  if (auth === false) return { mode: 'open' };
  if (auth === undefined) {
    const token = env.AWA_DASHBOARD_TOKEN;
    if (token !== undefined && token !== '')
      return { mode: 'token', token: checkToken('AWA_DASHBOARD_TOKEN', token) };
    const username = env.AWA_DASHBOARD_USER;
    const password = env.AWA_DASHBOARD_PASSWORD;
    if (username || password) {
      if (!username)
        throw new DashboardConfigError('AWA_DASHBOARD_USER', 'is needed with AWA_DASHBOARD_PASSWORD');
      if (!password)
        throw new DashboardConfigError('AWA_DASHBOARD_PASSWORD', 'is needed with AWA_DASHBOARD_USER');
      return basic('AWA_DASHBOARD_USER', username, 'AWA_DASHBOARD_PASSWORD', password);
    }
    throw new DashboardConfigError(
      'auth',
      'no credentials: pass auth { token } or { username, password }, or set AWA_DASHBOARD_TOKEN (or AWA_DASHBOARD_USER and AWA_DASHBOARD_PASSWORD)',
    );
  }
  if (typeof auth !== 'object' || auth === null || Array.isArray(auth)) {
    throw new DashboardConfigError('auth', 'must be { token }, { username, password } or false');
  }
  const a = auth as Record<string, unknown>;
  const keys = Object.keys(a).sort().join(',');
  if (keys === 'token') return { mode: 'token', token: checkToken('auth.token', a.token) };
  if (keys === 'password,username') return basic('auth.username', a.username, 'auth.password', a.password);
  throw new DashboardConfigError(
    'auth',
    `must be { token } or { username, password }, got keys ${keys || 'none'}`,
  );
}

/** Adds the read-only credential (the option, else the environment's) to `auth`, of the same kind. */
function withReadOnly(
  auth: ResolvedAuth,
  option: unknown,
  env: Readonly<Record<string, string | undefined>>,
): ResolvedAuth {
  const fromEnv = {
    token: env.AWA_DASHBOARD_READONLY_TOKEN || undefined,
    username: env.AWA_DASHBOARD_READONLY_USER || undefined,
    password: env.AWA_DASHBOARD_READONLY_PASSWORD || undefined,
  };
  if (option === undefined && !fromEnv.token && !fromEnv.username && !fromEnv.password) return auth;
  if (option !== undefined && (typeof option !== 'object' || option === null || Array.isArray(option)))
    throw new DashboardConfigError('readOnly', 'must be { token } or { username, password }');
  const given = option as Record<string, unknown> | undefined;
  const field = (key: string, envName: string) => (given ? `readOnly.${key}` : envName);
  if (auth.mode === 'open') {
    throw new DashboardConfigError(
      given ? 'readOnly' : 'AWA_DASHBOARD_READONLY_*',
      'needs authentication: with auth: false everyone may act',
    );
  }
  if (auth.mode === 'token') {
    if (given && Object.keys(given).sort().join(',') !== 'token')
      throw new DashboardConfigError('readOnly', 'must be { token } when auth is a token');
    const token = checkToken(
      field('token', 'AWA_DASHBOARD_READONLY_TOKEN'),
      given ? given.token : fromEnv.token,
    );
    if (token === auth.token)
      throw new DashboardConfigError(
        field('token', 'AWA_DASHBOARD_READONLY_TOKEN'),
        'must differ from the operator token',
      );
    return { ...auth, readOnlyToken: token };
  }
  if (given && Object.keys(given).sort().join(',') !== 'password,username')
    throw new DashboardConfigError(
      'readOnly',
      'must be { username, password } when auth is a username and password',
    );
  const ro = basic(
    field('username', 'AWA_DASHBOARD_READONLY_USER'),
    given ? given.username : fromEnv.username,
    field('password', 'AWA_DASHBOARD_READONLY_PASSWORD'),
    given ? given.password : fromEnv.password,
  ) as { username: string; password: string };
  if (ro.username === auth.username)
    throw new DashboardConfigError(
      field('username', 'AWA_DASHBOARD_READONLY_USER'),
      'must differ from the operator user',
    );
  return { ...auth, readOnly: { username: ro.username, password: ro.password } };
}

function resolveProxies(value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value))
    throw new DashboardConfigError('trustedProxies', 'must be an array of IP addresses');
  return value.map((v, i) => {
    const address = proxyAddress(v);
    if (address === null)
      throw new DashboardConfigError(
        `trustedProxies[${i}]`,
        `must be an IP address, got ${JSON.stringify(v)}`,
      );
    return address;
  });
}

function checkToken(field: string, token: unknown): string {
  if (typeof token !== 'string' || token.length < MIN_TOKEN_CHARS) {
    throw new DashboardConfigError(field, `must be a string of at least ${MIN_TOKEN_CHARS} characters`);
  }
  if (!/^[\x21-\x7e]+$/.test(token)) {
    throw new DashboardConfigError(field, 'must be printable ASCII without spaces (it travels in a header)');
  }
  return token;
}

function basic(userField: string, username: unknown, passField: string, password: unknown): ResolvedAuth {
  if (typeof username !== 'string' || username.length === 0 || username.length > 128) {
    throw new DashboardConfigError(userField, 'must be a string of 1 to 128 characters');
  }
  // Basic auth splits user:password at the first colon, and headers carry no control characters.
  // eslint-disable-next-line no-control-regex
  if (username.includes(':') || /[\x00-\x1f\x7f]/.test(username)) {
    throw new DashboardConfigError(userField, 'must not contain ":" or control characters');
  }
  if (typeof password !== 'string' || password.length < MIN_PASSWORD_CHARS || password.length > 1024) {
    throw new DashboardConfigError(passField, `must be a string of ${MIN_PASSWORD_CHARS} to 1024 characters`);
  }
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(password)) {
    throw new DashboardConfigError(passField, 'must not contain control characters');
  }
  return { mode: 'basic', username, password };
}

function resolveBasePath(value: unknown): string {
  if (value === undefined) return '/dashboard';
  if (typeof value !== 'string' || !/^(\/[A-Za-z0-9._~-]+)*\/?$/.test(value) || value === '') {
    throw new DashboardConfigError('basePath', 'must be a path like /dashboard (letters, digits, . _ ~ -)');
  }
  return value.replace(/\/$/, '');
}

function resolveOrigins(value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new DashboardConfigError('allowedOrigins', 'must be an array of origins');
  return value.map((o, i) => {
    let url: URL | null = null;
    try {
      url = typeof o === 'string' ? new URL(o) : null;
    } catch {
      url = null;
    }
    if (!url || url.origin !== o || !/^https?:$/.test(url.protocol)) {
      throw new DashboardConfigError(
        `allowedOrigins[${i}]`,
        `must be an origin like https://ops.example.com, got ${JSON.stringify(o)}`,
      );
    }
    return o;
  });
}

function ttl(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 60_000 || value > 30 * DAY_MS) {
    throw new DashboardConfigError('sessionTtlMs', 'must be an integer from 60000 (1 min) to 30 days');
  }
  return value;
}

function flag(field: string, value: unknown): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean') throw new DashboardConfigError(field, 'must be true or false');
  return value;
}

/** 127.0.0.0/8, ::1 (also IPv4-mapped) and localhost. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h;
  if (isIP(v4) === 4) return v4.startsWith('127.');
  return isIP(h) === 6 && /^(0{0,4}:){2,7}0{0,3}1$|^::1$/.test(h);
}
