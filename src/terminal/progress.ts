// A progress bar on stderr: redrawn in place on a terminal, a line every 10 % otherwise (CI logs). Used by
// the CLI (demo) and by bench/, so it lives outside both and imports nothing.

export class ProgressBar {
  private lastDraw = 0;
  private lastDecile = -1;
  private readonly tty = Boolean(process.stderr.isTTY);
  private readonly started = performance.now();

  constructor(
    private readonly label: string,
    private readonly total: number,
  ) {}

  update(done: number, force = false): void {
    const now = performance.now();
    const frac = this.total > 0 ? Math.min(done / this.total, 1) : 1;
    if (this.tty) {
      if (!force && now - this.lastDraw < 100 && frac < 1) return;
      this.lastDraw = now;
      const width = 30;
      const filled = Math.round(frac * width);
      const rate = done / Math.max((now - this.started) / 1000, 1e-3);
      process.stderr.write(
        `\r${this.label.padEnd(10)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(frac * 100).toFixed(0).padStart(3)}% ${done.toLocaleString('en-US')}/${this.total.toLocaleString('en-US')} ${Math.round(rate).toLocaleString('en-US')}/s `,
      );
      return;
    }
    const decile = Math.floor(frac * 10);
    if (decile !== this.lastDecile) {
      this.lastDecile = decile;
      process.stderr.write(
        `${this.label}: ${decile * 10}% (${done.toLocaleString('en-US')}/${this.total.toLocaleString('en-US')})\n`,
      );
    }
  }

  finish(done: number): void {
    this.update(done, true);
    if (this.tty) process.stderr.write('\n');
  }
}
