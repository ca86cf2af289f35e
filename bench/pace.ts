// Open-loop pacing: the producer is owed `rate × elapsed wall-clock time` jobs, whatever its loop did.
// A stalled tick (GC, slow insert) leaves jobs owed and the next tick sends them, so the offered load
// stays what was asked for instead of silently dropping to what the system under test can absorb.

export class Pacer {
  private last: number;
  private credit = 0;
  issued = 0;

  constructor(
    private rate: number,
    now = performance.now(),
  ) {
    this.last = now;
  }

  setRate(rate: number, now = performance.now()): void {
    this.owed(now); // credit the old rate up to now before switching
    this.rate = Math.max(0, rate);
  }

  /** Whole jobs owed now; the caller reports what it sent with `sent()`. */
  owed(now = performance.now()): number {
    this.credit += (this.rate * Math.max(0, now - this.last)) / 1000;
    this.last = now;
    return Math.floor(this.credit);
  }

  sent(n: number): void {
    this.credit -= n;
    this.issued += n;
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Epoch milliseconds with sub-millisecond precision (same clock in producer and handler). */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}
