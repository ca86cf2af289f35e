// What the flow-control proof computes from the starts the database recorded (bench/limits/windows.ts).
import { describe, expect, it } from 'vitest';
import {
  maxInWindow,
  roomLeftAtClaims,
  sustainedRate,
  type ClaimedStart,
} from '../../bench/limits/windows.js';

const T0 = 1_765_000_000_000;

/** The starts of one claim: `counts` jobs of each key, at `at` ms after T0, in receipt `batch`. */
function claim(
  at: number,
  batch: number,
  counts: Record<string, number>,
  next: { id: number },
  instance = 'h1',
): ClaimedStart[] {
  return Object.entries(counts).flatMap(([key, n]) =>
    Array.from({ length: n }, () => ({
      key,
      jobId: String(next.id++),
      at: T0 + at,
      instance,
      batch: BigInt(batch),
    })),
  );
}

/** The claims that left room under a limit of 2 a second, with `jobs` jobs of each key. */
const roomLeft = (starts: ClaimedStart[], jobs: Record<string, number>) =>
  roomLeftAtClaims(starts, new Map(Object.entries(jobs)), 1_000, 2);

describe('limit windows', () => {
  it('maxInWindow counts a half-open window: a start exactly one period later is in the next', () => {
    expect(maxInWindow([0, 500, 999.999], 1_000)).toBe(3);
    expect(maxInWindow([0, 500, 1_000], 1_000)).toBe(2);
  });

  it('sustainedRate counts only the whole windows before the last start', () => {
    // 2 per window for three windows, then a last start: 6 starts in 3 windows of a limit of 2.
    expect(sustainedRate([0, 1, 1_000, 1_001, 2_000, 2_001, 3_500], 1_000, 2)).toEqual({
      windows: 3,
      starts: 6,
      percent: 100,
    });
    expect(sustainedRate([0, 1_000, 2_000, 3_000], 1_000, 2).percent).toBe(50);
  });

  it('roomLeftAtClaims: claims that filled every backlogged key leave nothing', () => {
    const next = { id: 1 };
    const starts = [
      ...claim(0, 1, { a: 2, b: 2 }, next),
      // The window of a reopens at 1,000 ms: the claim there takes its whole limit again.
      ...claim(1_000, 2, { a: 2, b: 2 }, next, 'h2'),
      ...claim(2_000, 3, { a: 1 }, next),
    ];
    // b has no job left after the second claim; a's last job started at the third.
    expect(roomLeft(starts, { a: 5, b: 4 })).toEqual([]);
  });

  it('roomLeftAtClaims names a claim that left a backlogged key under its limit, and only while it had jobs left', () => {
    const next = { id: 1 };
    const starts = [...claim(0, 1, { a: 2, b: 1 }, next), ...claim(1_000, 2, { a: 2, b: 1 }, next)];
    expect(roomLeft(starts, { a: 4, b: 3 })).toEqual([
      { at: T0, instance: 'h1', key: 'b', inWindow: 1 },
      { at: T0 + 1_000, instance: 'h1', key: 'b', inWindow: 1 },
    ]);
    // With two jobs of b, the second claim started its last one: only the first left it room it could use.
    expect(roomLeft(starts, { a: 4, b: 2 })).toEqual([{ at: T0, instance: 'h1', key: 'b', inWindow: 1 }]);
  });

  it('roomLeftAtClaims judges a claim after all its receipts (one from the gate, one from the lanes)', () => {
    const next = { id: 1 };
    const starts = [
      ...claim(0, 1, { a: 2, b: 2 }, next),
      // One claim at 1,000 ms: a's jobs let through from the gate (batch 2), b's fresh from the lanes (batch 3).
      ...claim(1_000, 2, { a: 2 }, next),
      ...claim(1_000, 3, { b: 2 }, next),
    ];
    expect(roomLeft(starts, { a: 6, b: 6 })).toEqual([]);
    // The same receipts from two hosts are two claims: the first of them left b's room.
    const twoHosts = starts.map((s) => (s.batch === 3n ? { ...s, instance: 'h2' } : s));
    expect(roomLeft(twoHosts, { a: 6, b: 6 })).toEqual([
      { at: T0 + 1_000, instance: 'h1', key: 'b', inWindow: 0 },
    ]);
  });

  it('roomLeftAtClaims: a start exactly one period before a claim is out of its window', () => {
    const next = { id: 1 };
    const starts = [...claim(0, 1, { a: 2 }, next), ...claim(1_000, 2, { a: 1 }, next)];
    expect(roomLeft(starts, { a: 4 })).toEqual([{ at: T0 + 1_000, instance: 'h1', key: 'a', inWindow: 1 }]);
  });
});
