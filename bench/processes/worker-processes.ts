import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { sleep } from '../pace.js';
import { NO_USAGE, type WorkerLine, type WorkerProcessConfig, type WorkerUsage } from './protocol.js';

// The parent's handle on a benchmark worker process (worker-process.ts): spawn it, read its event lines,
// tell it to go, stop it (SIGTERM) or kill it (SIGKILL). Progress lines are folded into `completed`; every
// other line is kept in `lines`.

// Next to this module: worker-process.ts run through tsx from source, worker-process.js once built.
const FROM_SOURCE = import.meta.url.endsWith('.ts');
const ENTRY = fileURLToPath(new URL(`./worker-process.${FROM_SOURCE ? 'ts' : 'js'}`, import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Polls `cond` until it holds; fails with `what` after `timeoutMs`. */
export async function waitFor(
  what: string,
  cond: () => boolean | Promise<boolean>,
  timeoutMs: number,
  everyMs = 25,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

export class WorkerProcess {
  readonly lines: WorkerLine[] = [];
  /** Jobs this process completed (committed), as of its last progress or stopped line. */
  completed = 0;
  /** What its host has cost so far, as of the same line as `completed`. */
  usage: WorkerUsage = NO_USAGE;
  private stderr = '';
  private stopping = false;
  private readonly exited: Promise<number | null>;
  private exitCode: number | null | undefined;

  private constructor(
    readonly cfg: WorkerProcessConfig,
    private readonly proc: ChildProcess,
  ) {
    proc.stderr!.on('data', (d: Buffer) => (this.stderr = (this.stderr + d.toString()).slice(-4_000)));
    createInterface({ input: proc.stdout! }).on('line', (text) => {
      let line: WorkerLine;
      try {
        line = JSON.parse(text) as WorkerLine;
      } catch {
        return;
      }
      if (line.event === 'progress' || line.event === 'stopped') {
        this.completed = line.completed;
        this.usage = line.usage;
      }
      if (line.event !== 'progress') this.lines.push(line);
    });
    proc.stdin!.on('error', () => {}); // a dead child must not take the parent with it
    this.exited = new Promise((resolve) =>
      proc.on('exit', (code) => {
        this.exitCode = code;
        resolve(code);
      }),
    );
  }

  /** Starts the process and resolves once it says `ready`. */
  static async spawn(cfg: WorkerProcessConfig, timeoutMs = 60_000): Promise<WorkerProcess> {
    const args = [...(FROM_SOURCE ? ['--import', 'tsx'] : []), ENTRY, JSON.stringify(cfg)];
    const proc = spawn(process.execPath, args, {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const w = new WorkerProcess(cfg, proc);
    await waitFor(
      `worker process ${cfg.instanceId ?? proc.pid} to be ready`,
      () => {
        if (w.exitCode !== undefined)
          throw new Error(`worker process exited with ${w.exitCode}: ${w.stderr}`);
        return w.lines.some((l) => l.event === 'ready');
      },
      timeoutMs,
    );
    return w;
  }

  get pid(): number {
    return this.proc.pid!;
  }

  /** Starts the host of a process spawned with `waitForGo`. */
  go(): void {
    this.proc.stdin!.write('go\n');
  }

  isLeader(): boolean {
    let leader = false;
    for (const l of this.lines) if (l.event === 'leadership') leader = l.isLeader;
    return leader;
  }

  /** Attempts started here and not ended yet, as `jobId:attempt`. */
  running(): string[] {
    const open = new Set<string>();
    for (const l of this.lines) {
      if (l.event === 'start') open.add(`${l.id}:${l.attempt}`);
      else if (l.event === 'end') open.delete(`${l.id}:${l.attempt}`);
    }
    return [...open];
  }

  /** Why the process is gone though nobody stopped or killed it, or null. */
  crash(): string | null {
    if (this.stopping || this.exitCode === undefined) return null;
    return `worker process ${this.pid} exited on its own (${this.exitCode}): ${this.stderr.slice(-1_500)}`;
  }

  async kill(): Promise<void> {
    this.stopping = true;
    if (this.exitCode === undefined) this.proc.kill('SIGKILL');
    await this.exited;
  }

  /** Graceful stop; resolves with the exit code. */
  async stop(): Promise<number | null> {
    this.stopping = true;
    if (this.exitCode === undefined) this.proc.kill('SIGTERM');
    return this.exited;
  }
}
