// Peak resident memory of this process while one system runs. Sampled, because process.resourceUsage()
// only knows the lifetime peak and the systems run one after another in the same process.

export class RssSampler {
  private peak = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(intervalMs = 200) {
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  private sample(): void {
    this.peak = Math.max(this.peak, process.memoryUsage.rss());
  }

  stop(): number {
    clearInterval(this.timer);
    this.sample();
    return Math.round((this.peak / 2 ** 20) * 10) / 10;
  }
}
