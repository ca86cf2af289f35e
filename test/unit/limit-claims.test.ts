// The claim cadence the limits bench reports (bench/limits/claims.ts).
import { describe, expect, it } from 'vitest';
import { claimCadence } from '../../bench/limits/claims.js';
import type { ClaimedStart } from '../../bench/limits/windows.js';

const T0 = 1_765_000_000_000;
let nextId = 1;

/** `jobs` starts of one claim by `instance` at `at` ms after T0 (µs in the fraction). */
function claim(at: number, jobs: number, instance = 'h1'): ClaimedStart[] {
  return Array.from({ length: jobs }, (_, i) => ({
    key: `k${i % 7}`,
    jobId: String(nextId++),
    at: T0 + at,
    instance,
    batch: BigInt(nextId),
  }));
}

describe('claimCadence', () => {
  it('groups starts into claims by host and claim time, and reads the median jobs per claim and gap', () => {
    const starts = [
      ...claim(0, 200),
      ...claim(20, 220, 'h2'),
      ...claim(40.5, 230, 'h3'),
      ...claim(60.5, 10, 'h1'),
      ...claim(95, 240, 'h4'),
    ];
    // Claims 200, 220, 230, 10, 240 (median 220); gaps 20, 20.5, 20, 34.5 (median 20.5).
    expect(claimCadence(starts)).toEqual({
      claims: 5,
      jobsPerClaim: 220,
      gapMs: 20.5,
      ceilingJobsPerSec: 10_732,
    });
  });

  it('counts two hosts deciding at the same instant as two claims, and a claim split over receipts as one', () => {
    const split = claim(10, 3).map((s, i) => ({ ...s, batch: BigInt(i < 2 ? 100 : 101) }));
    const starts = [...claim(0, 4, 'h1'), ...claim(0, 6, 'h2'), ...split];
    // Gaps 0 and 10: of an even count, the median is the upper middle one.
    expect(claimCadence(starts)).toMatchObject({ claims: 3, jobsPerClaim: 4, gapMs: 10 });
  });

  it('reads nothing from no starts', () => {
    expect(claimCadence([])).toEqual({ claims: 0, jobsPerClaim: 0, gapMs: 0, ceilingJobsPerSec: 0 });
  });
});
