import * as hdr from 'hdr-histogram-js';

// A rolling-window latency histogram with bounded memory: one hdr histogram per second of the window,
// recycled as time moves on, merged on demand. Values in microseconds, 3 significant digits, up to 1 h.

const MAX_US = 3_600_000_000;

function build(): hdr.Histogram {
  return hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: MAX_US,
    numberOfSignificantValueDigits: 3,
  });
}

export class RollingHistogram {
  private readonly slices: { second: number; h: hdr.Histogram }[];
  private readonly merged = build();

  constructor(readonly windowS = 30) {
    this.slices = Array.from({ length: windowS }, () => ({ second: -1, h: build() }));
  }

  recordMs(ms: number, nowMs = Date.now()): void {
    const second = Math.floor(nowMs / 1000);
    const slice = this.slices[second % this.windowS]!;
    if (slice.second !== second) {
      slice.h.reset();
      slice.second = second;
    }
    slice.h.recordValue(Math.max(1, Math.min(Math.round(ms * 1000), MAX_US)));
  }

  /** Percentiles (ms) over the last `windowS` seconds; null when nothing was recorded. */
  percentilesMs(ps: readonly number[], nowMs = Date.now()): (number | null)[] {
    const oldest = Math.floor(nowMs / 1000) - this.windowS + 1;
    this.merged.reset();
    for (const s of this.slices) if (s.second >= oldest) this.merged.add(s.h);
    if (this.merged.totalCount === 0) return ps.map(() => null);
    return ps.map((p) => this.merged.getValueAtPercentile(p) / 1000);
  }
}
