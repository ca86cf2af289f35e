import type { ProgressWrite } from '../storage/index.js';

// Coalesces progress reports: a handler may report thousands of times a second, the database sees the
// latest value per attempt at most every `intervalMs`.

export class ProgressWriter {
  private pending = new Map<string, ProgressWrite>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly write: (w: ProgressWrite) => Promise<boolean>,
    private readonly onError: (err: unknown) => void,
    private readonly intervalMs = 200,
  ) {}

  report(w: ProgressWrite): void {
    this.pending.set(`${w.jobId}:${w.runLease}`, w);
    this.timer ??= setTimeout(() => void this.flush(), this.intervalMs);
  }

  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = [...this.pending.values()];
    this.pending.clear();
    this.flushing = this.flushing.then(async () => {
      for (const w of batch) await this.write(w).catch(this.onError);
    });
    return this.flushing;
  }
}
