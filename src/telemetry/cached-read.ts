// A read that several observers share and that runs at most once per `maxAgeMs`: the queue-health gauges
// are collected on the SDK's schedule (every 10–60 s usually, but a Prometheus scrape can come any time),
// and each collection must not turn into a query.

export class CachedRead<T> {
  private value: T;
  private readAt = -Infinity;
  private inFlight: Promise<T> | null = null;

  constructor(
    private readonly read: () => Promise<T>,
    private readonly maxAgeMs: number,
    initial: T,
    private readonly onError: (err: unknown) => void,
  ) {
    this.value = initial;
  }

  /** The cached value when fresh, else a new read (a failed read reports and keeps the last value). */
  get(): Promise<T> {
    if (performance.now() - this.readAt < this.maxAgeMs) return Promise.resolve(this.value);
    this.inFlight ??= this.read()
      .then(
        (v) => {
          this.value = v;
          this.readAt = performance.now();
        },
        (err: unknown) => {
          // Do not retry on every collection while the database is away: wait out the same interval.
          this.readAt = performance.now();
          this.onError(err);
        },
      )
      .then(() => {
        this.inFlight = null;
        return this.value;
      });
    return this.inFlight;
  }
}
