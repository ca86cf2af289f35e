// How a drain's claims came, from the starts the database recorded (bench/limits/fleet.ts, StartsCollector): how
// many claims started jobs, how many jobs each started, and, for a limited queue, how far apart their decisions
// fell. A limited queue's claims decide one at a time under the queue's limits lock (docs/flow-control.md), and
// each records the moment it decided as its receipts' claim time; while claims wait for the lock, the next one
// decides as soon as the last one commits, so the gap between two decisions is about one claim's time under the
// lock. Jobs per claim over that gap is then the most the drain can start per second, whatever the handlers do.
import { median, round } from '../scenario.js';
import { claimsOf, type ClaimedStart } from './windows.js';

export interface ClaimCadence {
  /** Claims that started at least one job. */
  claims: number;
  /** Median jobs started per claim. */
  jobsPerClaim: number;
  /** Median gap between consecutive claims' decisions, ms. */
  gapMs: number;
  /** jobsPerClaim / gapMs, per second: the drain's ceiling if its claims come one after another. */
  ceilingJobsPerSec: number;
}

/** Reads the cadence of the claims the starts belong to (claimsOf()). */
export function claimCadence(starts: readonly ClaimedStart[]): ClaimCadence {
  const ordered = claimsOf(starts).sort((a, b) => a.at - b.at);
  const gaps = ordered.slice(1).map((c, i) => c.at - ordered[i]!.at);
  const jobsPerClaim = median(ordered.map((c) => c.starts.length));
  const gapMs = median(gaps);
  return {
    claims: ordered.length,
    jobsPerClaim,
    gapMs: round(gapMs, 2),
    ceilingJobsPerSec: gapMs > 0 ? Math.round((jobsPerClaim * 1000) / gapMs) : 0,
  };
}
