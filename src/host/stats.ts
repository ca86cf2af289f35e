import * as hdr from 'hdr-histogram-js';

// Counters and the pickup-latency histogram (ready → handler start) of one worker host (bounded memory, 3 significant digits).

export class HostStats {
  completed = 0;
  retried = 0;
  failed = 0;
  cancelled = 0;
  snoozed = 0;
  /** Attempts parked for an external callback. */
  parked = 0;
  stale = 0;
  claimed = 0;
  claimCalls = 0;
  /** Time the claim calls took, summed (request to answer, ms): with claimCalls, what a claim costs. */
  claimMs = 0;
  flushes = 0;
  /** In microseconds, so sub-millisecond pickups stay visible. */
  readonly pickupUs = hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 3_600_000_000,
    numberOfSignificantValueDigits: 3,
  });

  recordPickup(ms: number): void {
    this.pickupUs.recordValue(Math.max(1, Math.min(Math.round(ms * 1000), 3_600_000_000)));
  }

  snapshot() {
    return {
      completed: this.completed,
      retried: this.retried,
      failed: this.failed,
      cancelled: this.cancelled,
      snoozed: this.snoozed,
      parked: this.parked,
      stale: this.stale,
      claimed: this.claimed,
      claimCalls: this.claimCalls,
      claimMs: this.claimMs,
      flushes: this.flushes,
      pickupP50Ms: this.pickupUs.getValueAtPercentile(50) / 1000,
      pickupP99Ms: this.pickupUs.getValueAtPercentile(99) / 1000,
    };
  }
}
