// Login throttling per client address. After LOGIN_FAILURE_LIMIT failed logins (form, bearer token or basic
// credentials) within LOGIN_FAILURE_WINDOW_MS, the address is refused for a lockout that doubles with each
// further strike (1 min, 2, 4… up to 15 min) without its credentials being checked; a success clears it.
// Memory is bounded: at most MAX_TRACKED addresses are remembered, the least recently seen forgotten first.

export const LOGIN_FAILURE_LIMIT = 5;
export const LOGIN_FAILURE_WINDOW_MS = 60_000;
const FIRST_LOCKOUT_MS = 60_000;
const MAX_LOCKOUT_MS = 15 * 60_000;
const MAX_TRACKED = 10_000;

interface Entry {
  /** Failures since windowStart. */
  failures: number;
  windowStart: number;
  /** Lockouts so far: the next one lasts FIRST_LOCKOUT_MS × 2^strikes. */
  strikes: number;
  blockedUntil: number;
  lastSeen: number;
}

export class LoginThrottle {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Seconds the address must still wait (for Retry-After), or 0 when it may try. */
  retryAfterSeconds(address: string): number {
    const e = this.entries.get(address);
    const left = e ? e.blockedUntil - this.now() : 0;
    return left > 0 ? Math.ceil(left / 1000) : 0;
  }

  /** Counts a failed login; returns the lockout it started in seconds, or 0. */
  failed(address: string): number {
    const now = this.now();
    const e = this.touch(address, now);
    if (now - e.windowStart > LOGIN_FAILURE_WINDOW_MS) {
      e.failures = 0;
      e.windowStart = now;
    }
    e.failures++;
    if (e.failures < LOGIN_FAILURE_LIMIT) return 0;
    const lockout = Math.min(FIRST_LOCKOUT_MS * 2 ** e.strikes, MAX_LOCKOUT_MS);
    e.strikes++;
    e.failures = 0;
    e.windowStart = now;
    e.blockedUntil = now + lockout;
    return lockout / 1000;
  }

  succeeded(address: string): void {
    this.entries.delete(address);
  }

  /** How many addresses are remembered (for tests of the bound). */
  get size(): number {
    return this.entries.size;
  }

  /** The address's entry, moved to the newest end; a quiet one (no lockout running, none for the longest
   * lockout's length) starts again from nothing, strikes included. */
  private touch(address: string, now: number): Entry {
    let e = this.entries.get(address);
    this.entries.delete(address);
    if (!e || (e.blockedUntil <= now && now - e.lastSeen > MAX_LOCKOUT_MS)) {
      e = { failures: 0, windowStart: now, strikes: 0, blockedUntil: 0, lastSeen: now };
    }
    e.lastSeen = now;
    this.entries.set(address, e);
    while (this.entries.size > MAX_TRACKED) {
      // Maps iterate in insertion order: the first key is the least recently seen address.
      this.entries.delete(this.entries.keys().next().value!);
    }
    return e;
  }
}
