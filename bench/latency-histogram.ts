import * as hdr from 'hdr-histogram-js';

// Pickup latency (enqueue → handler start) in microseconds, 3 significant digits, bounded memory.

export class LatencyHistogram {
  private readonly h = hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 3_600_000_000,
    numberOfSignificantValueDigits: 3,
  });

  recordMs(ms: number): void {
    this.h.recordValue(Math.max(1, Math.min(Math.round(ms * 1000), 3_600_000_000)));
  }

  get count(): number {
    return this.h.totalCount;
  }

  percentileMs(p: number): number | null {
    return this.h.totalCount === 0 ? null : this.h.getValueAtPercentile(p) / 1000;
  }

  maxMs(): number | null {
    return this.h.totalCount === 0 ? null : this.h.maxValue / 1000;
  }

  /** The report's latency columns in ms (µs resolution); NaN when nothing was recorded. A percentile is
   * the top of its bucket (3 significant digits), so it is capped at the exact maximum. */
  summaryMs(): { p50Ms: number; p95Ms: number; p99Ms: number; maxMs: number } {
    const max = this.maxMs();
    const ms = (v: number | null) =>
      v === null || max === null ? NaN : Math.round(Math.min(v, max) * 1000) / 1000;
    return {
      p50Ms: ms(this.percentileMs(50)),
      p95Ms: ms(this.percentileMs(95)),
      p99Ms: ms(this.percentileMs(99)),
      maxMs: ms(max),
    };
  }

  reset(): void {
    this.h.reset();
  }
}
