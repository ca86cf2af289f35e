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
