import { describe, expect, it } from 'vitest';
import { retryDelayMs } from '../../src/model/backoff.js';

const HOUR = 3_600_000;
const CAP = 24 * HOUR;

describe('retryDelayMs', () => {
  it('is exactly 2^attempt seconds with no jitter (random = 0)', () => {
    expect([0, 1, 2, 3, 10].map((n) => retryDelayMs(n, () => 0))).toEqual([
      1_000, 2_000, 4_000, 8_000, 1_024_000,
    ]);
  });

  it('adds at most 25 % jitter (random → 1) and scales linearly in between', () => {
    expect(retryDelayMs(1, () => 1)).toBe(2_500);
    expect(retryDelayMs(3, () => 1)).toBe(10_000);
    expect(retryDelayMs(3, () => 0.5)).toBe(9_000);
    expect(retryDelayMs(2, () => 0.1)).toBe(4_100);
  });

  it('stays within [2^n s, 1.25 · 2^n s] for every attempt below the cap, with the real random', () => {
    for (let n = 1; n <= 16; n++) {
      const base = 2 ** n * 1_000;
      for (let i = 0; i < 50; i++) {
        const d = retryDelayMs(n);
        expect(d).toBeGreaterThanOrEqual(base);
        expect(d).toBeLessThanOrEqual(1.25 * base);
        expect(Number.isInteger(d)).toBe(true);
      }
    }
  });

  it('is deterministic for an injected random', () => {
    const seq = [0.3, 0.7, 0.3];
    let i = 0;
    const random = () => seq[i++ % seq.length]!;
    const first = [retryDelayMs(4, random), retryDelayMs(4, random), retryDelayMs(4, random)];
    expect(first).toEqual([17_200, 18_800, 17_200]);
  });

  it('caps at 24 hours, jitter included', () => {
    // 2^16 s = 18.2 h: under the cap even with full jitter (22.75 h).
    expect(retryDelayMs(16, () => 1)).toBe(81_920_000);
    // 2^17 s = 36.4 h: capped whatever the jitter.
    expect(retryDelayMs(17, () => 0)).toBe(CAP);
    expect(retryDelayMs(17, () => 1)).toBe(CAP);
    expect(retryDelayMs(1_000, () => 0.5)).toBe(CAP);
    expect(retryDelayMs(Number.MAX_SAFE_INTEGER, () => 1)).toBe(CAP);
  });

  it('treats a negative attempt as attempt 0', () => {
    expect(retryDelayMs(-3, () => 0)).toBe(1_000);
  });
});
