// Notices when this thread's event loop stood still. Everything a host does on time runs on it: heartbeats,
// claims, flushes, cancels. A handler that runs CPU-bound work inline (or any other synchronous code of the
// application) holds all of them back, and a host whose heartbeat stays silent for heartbeatStalenessMs looks
// dead: the leader rescues its attempts and they run again elsewhere. The watch cannot stop that; it says
// what happened, after the fact, so the cause can be found before it costs duplicates. One timer, checked for
// lateness: no cost per job. Only a stall the process spent working counts: its CPU time grew by half the stall,
// or by the reporting threshold itself (a handler that burns a second of CPU inline on a machine so busy that
// it got a fifth of a core stalled the loop five seconds: that is the handler's stall too). A process that was
// stopped (SIGSTOP, a paused VM), or barely ran, worked for almost none of it and is not reported.

export class LoopWatch {
  private timer: NodeJS.Timeout | null = null;
  private last = 0;
  private lastCpu: NodeJS.CpuUsage = process.cpuUsage();
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
    this.lastCpu = process.cpuUsage();
    this.timer = setInterval(() => this.tick(), this.everyMs);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private tick(): void {
    const now = performance.now();
    const cpu = process.cpuUsage();
    const stalled = now - this.last - this.everyMs;
    const workedMs = (cpu.user - this.lastCpu.user + cpu.system - this.lastCpu.system) / 1_000;
    this.last = now;
    this.lastCpu = cpu;
    if (stalled >= this.stallMs && workedMs >= Math.min(stalled / 2, this.stallMs))
      this.onStall(Math.round(stalled));
  }
}
