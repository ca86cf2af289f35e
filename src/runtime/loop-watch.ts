// Notices when this thread's event loop stood still. Everything a host does on time runs on it: heartbeats,
// claims, flushes, cancels. A handler that runs CPU-bound work inline (or any other synchronous code of the
// application) holds all of them back, and a host whose heartbeat stays silent for heartbeatStalenessMs looks
// dead: the leader rescues its attempts and they run again elsewhere. The watch cannot stop that; it says
// what happened, after the fact, so the cause can be found before it costs duplicates. One timer, checked for
// lateness: no cost per job.

export class LoopWatch {
  private timer: NodeJS.Timeout | null = null;
  private last = 0;
  private readonly everyMs: number;

  constructor(
    /** A stall at least this long is reported. */
    private readonly stallMs: number,
    private readonly onStall: (stalledMs: number) => void,
  ) {
    this.everyMs = Math.min(1_000, Math.max(50, Math.floor(stallMs / 4)));
  }

  start(): void {
    this.last = performance.now();
    this.timer = setInterval(() => this.tick(), this.everyMs);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private tick(): void {
    const now = performance.now();
    const stalled = now - this.last - this.everyMs;
    this.last = now;
    if (stalled >= this.stallMs) this.onStall(Math.round(stalled));
  }
}
