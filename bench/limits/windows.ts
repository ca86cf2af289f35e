// What the flow-control runs compute from start times (bench/limits/fleet.ts collects them): the most starts of
// one key in any window of a period, and the rate a key kept up while it had a backlog.

/** The most of `times` in any half-open window [t, t + periodMs): a window holding the most can be slid until
 * it opens at one of them, so opening one at each is enough. */
export function maxInWindow(times: readonly number[], periodMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let most = 0;
  let end = 0;
  for (let i = 0; i < sorted.length; i++) {
    while (end < sorted.length && sorted[end]! < sorted[i]! + periodMs) end++;
    most = Math.max(most, end - i);
  }
  return most;
}

/** The most starts of one key in any window, over every key. */
export function maxPerKeyInWindow(byKey: ReadonlyMap<string, readonly number[]>, periodMs: number): number {
  let most = 0;
  for (const times of byKey.values()) most = Math.max(most, maxInWindow(times, periodMs));
  return most;
}

export interface Sustained {
  /** Back-to-back windows of periodMs from the key's first start that closed before its last start: the key
   * had jobs left through each of them. */
  windows: number;
  /** Starts in those windows. */
  starts: number;
  /** starts / (windows × limit), as a percentage. */
  percent: number;
}

/**
 * The rate a key sustained under backlog: its starts in the back-to-back windows of `periodMs` from its first
 * start, counting only the windows that closed before its last start (through each of them the key still had
 * jobs to start, so the limit alone held them back), over `limit` per window.
 */
export function sustainedRate(times: readonly number[], periodMs: number, limit: number): Sustained {
  const sorted = [...times].sort((a, b) => a - b);
  if (sorted.length === 0) return { windows: 0, starts: 0, percent: 0 };
  const first = sorted[0]!;
  const last = sorted.at(-1)!;
  const windows = Math.floor((last - first) / periodMs);
  const end = first + windows * periodMs;
  const starts = sorted.filter((t) => t < end).length;
  return { windows, starts, percent: windows === 0 ? 0 : (100 * starts) / (windows * limit) };
}

/** The lowest sustained rate over every key (the one the assertion is about), and the sum. */
export function sustainedOverKeys(
  byKey: ReadonlyMap<string, readonly number[]>,
  periodMs: number,
  limit: number,
): { minPercent: number; windows: number; starts: number } {
  let minPercent = Number.POSITIVE_INFINITY;
  let windows = 0;
  let starts = 0;
  for (const times of byKey.values()) {
    const s = sustainedRate(times, periodMs, limit);
    minPercent = Math.min(minPercent, s.percent);
    windows += s.windows;
    starts += s.starts;
  }
  return { minPercent: byKey.size === 0 ? 0 : minPercent, windows, starts };
}

/** A start as its claim recorded it (bench/limits/fleet.ts, DbStart). */
export interface ClaimedStart {
  key: string;
  jobId: string;
  /** The claim's transaction time, epoch ms with µs in the fraction. */
  at: number;
  instance: string;
  /** Its receipt's batch id. */
  batch: bigint;
}

const micros = (ms: number) => Math.round(ms * 1000);

/** The starts of one claim: one host's starts at one claim time (a claim's receipts share it), with its first
 * receipt's batch id. */
export interface Claim {
  at: number;
  instance: string;
  batch: bigint;
  starts: ClaimedStart[];
}

/** Groups starts into their claims, in no particular order. Two claims at the same instant on different hosts are
 * two claims. */
export function claimsOf(starts: readonly ClaimedStart[]): Claim[] {
  const claims = new Map<string, Claim>();
  for (const s of starts) {
    const id = `${s.instance}@${micros(s.at)}`;
    const c = claims.get(id) ?? { at: s.at, instance: s.instance, batch: s.batch, starts: [] };
    if (s.batch < c.batch) c.batch = s.batch;
    c.starts.push(s);
    claims.set(id, c);
  }
  return [...claims.values()];
}

/** A claim that left a key room under its rate while the key still had a job that had never started. */
export interface RoomLeft {
  at: number;
  instance: string;
  key: string;
  /** The key's starts in the window that ends at the claim, after it: fewer than the limit. */
  inWindow: number;
}

/**
 * The claims that gave out fewer starts than a per-key rate allowed. A limited queue's claims decide one at a
 * time under the queue's limits lock, taking their receipts' batch ids as they go, and each counts every start
 * logged before its turn later than one period before its own time (claim_limited(), rate_room()). So after each
 * claim, a key that still has a job never started must have `limit` starts in that window; with fewer, the claim
 * left room the key could have used. This compares the claims' own times with each other, never how soon a claim
 * came, so it holds on a machine of any speed; it needs every job enqueued before the claims, a burst equal to the
 * limit, and claims never short of permits (each host with more free permits than all the keys' limits together).
 */
export function roomLeftAtClaims(
  starts: readonly ClaimedStart[],
  jobsPerKey: ReadonlyMap<string, number>,
  periodMs: number,
  limit: number,
): RoomLeft[] {
  const claims = claimsOf(starts);
  const times = new Map<string, number[]>();
  const started = new Map<string, Set<string>>();
  const left: RoomLeft[] = [];
  for (const c of claims.sort((a, b) => (a.batch < b.batch ? -1 : a.batch > b.batch ? 1 : 0))) {
    for (const s of c.starts) {
      times.set(s.key, [...(times.get(s.key) ?? []), micros(s.at)]);
      started.set(s.key, (started.get(s.key) ?? new Set()).add(s.jobId));
    }
    const opens = micros(c.at) - micros(periodMs);
    for (const [key, jobs] of jobsPerKey) {
      if ((started.get(key)?.size ?? 0) >= jobs) continue;
      const inWindow = (times.get(key) ?? []).filter((t) => t > opens).length;
      if (inWindow < limit) left.push({ at: c.at, instance: c.instance, key, inWindow });
    }
  }
  return left;
}
