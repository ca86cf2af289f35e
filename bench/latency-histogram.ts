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

  reset(): void {
    this.h.reset();
  }
}
