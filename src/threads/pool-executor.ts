import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { MessageChannel, receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import { Packr } from 'msgpackr';
import { Piscina } from 'piscina';
import { InvalidOptionError } from '../model/errors.js';
import type { Job } from '../model/job.js';
import type { JobKind } from '../model/job-kind.js';
import { checkThreadMessage, ownBytes, readOutcomes, type AbortMessage, type PoolTask } from './protocol.js';
import { poolWorkerEntry } from './entry.js';
import type { HandlerEntry } from '../model/handler.js';
import { resolveThreadPool, type ThreadPoolOptions } from './config.js';

export type { PoolJobContext } from './protocol.js';

// Runs handlers in a Piscina worker-thread pool so CPU-heavy kinds never stall the coordinator.
//
// Batching: jobs wait here (at most batchDelayMs, or until maxBatch are waiting) and go to a thread as
// one task, because a task costs ~65 µs against ~5 µs for a job run inline. Waiting jobs are spread over
// the free task slots, so a handful of heavy jobs still lands on every thread. In-flight tasks are
// bounded here (2 per thread: one running, one ready to start); Piscina's maxQueue is set to that same
// bound so its own queue can never reject a task.
//
// Cancellation: each task has its own MessageChannel. When a job's signal aborts, an abort message goes
// down the port; the thread aborts that job's AbortSignal, or never starts the job if it has not started.
// A MessagePort rather than Atomics because the thing to reach is an AbortSignal, which only an event
// handler can fire: a flag in shared memory would need handlers to poll a non-standard API. A handler
// busy in synchronous code sees neither; the grace timer covers that case: if no outcome arrives within
// graceMs, the task's Piscina signal aborts, which makes Piscina terminate that thread and start a new
// one. Every job of the task without an outcome then fails with an Error (the normal retry path).
//
// Containment: a throw fails its own job only (outcomes are reported per job). A crash or
// process.exit() fails the jobs of that task whose outcome had not arrived; Piscina replaces the thread.
// Everything a thread sends is checked at the door (checkThreadMessage, readOutcomes, outcomeFromWire in
// threads/protocol.ts) and nothing in the port listener may throw: handler code shares the thread with
// our side of the protocol, and an outcome it garbles (or a RetryAfter with a delay of -5 or ten years)
// fails that attempt with an error that says so, never the process.

export interface PoolExecutorOptions extends ThreadPoolOptions {
  /** A line a handler wrote with ctx.log(...). */
  onLog?: (jobId: string, line: string) => void;
  /** A value a handler passed to ctx.progress(...), tagged with the attempt's fence. */
  onProgress?: (jobId: string, runLease: number, value: unknown) => void;
  /** Pool-level problems not tied to a job (a thread dying between tasks). */
  onError?: (err: unknown) => void;
}

/** Thrown into the attempts of a thread that died or was terminated. */
export class PoolThreadError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PoolThreadError';
  }
}

interface Run {
  job: Job;
  signal: AbortSignal;
  /** With the result the thread encoded (encodeResult()), or undefined when the handler returned nothing. */
  resolve: (result: string | undefined) => void;
  reject: (err: unknown) => void;
  onAbort: () => void;
  task: Task | null;
  index: number;
  settled: boolean;
  graceTimer: NodeJS.Timeout | null;
}

interface Task {
  runs: Run[];
  port: MessagePort;
  /** The thread said it began; until then an abort can settle a job without touching any thread. */
  started: boolean;
  /** Aborting this makes Piscina terminate the thread running the task. */
  kill: AbortController;
  /** Set when the grace timer of this run terminated the thread. */
  culprit: Run | null;
  /** What the thread sent that could not be read (outcomes lost with it count as missing). */
  problems: string[];
  done: Promise<void>;
}

const packr = new Packr({ useRecords: false });

export class PoolExecutor {
  readonly module: string;
  readonly size: number;
  readonly maxBatch: number;
  readonly batchDelayMs: number;
  readonly graceMs: number;
  private readonly piscina: Piscina<PoolTask, Uint8Array | null>;
  private readonly maxInFlight: number;
  private readonly waiting: Run[] = [];
  private readonly tasks = new Set<Task>();
  private timer: NodeJS.Timeout | null = null;
  private immediate: NodeJS.Immediate | null = null;
  private closed = false;

  constructor(private readonly options: PoolExecutorOptions) {
    const o = resolveThreadPool('threadPool', {
      module: options.module,
      size: options.size,
      maxBatch: options.maxBatch,
      batchDelayMs: options.batchDelayMs,
      graceMs: options.graceMs,
    });
    this.module = o.module;
    this.size = o.size;
    this.maxBatch = o.maxBatch;
    this.batchDelayMs = o.batchDelayMs;
    this.graceMs = o.graceMs;
    this.maxInFlight = o.size * 2;
    const entry = poolWorkerEntry();
    this.piscina = new Piscina<PoolTask, Uint8Array | null>({
      filename: entry,
      minThreads: o.size,
      maxThreads: o.size,
      concurrentTasksPerWorker: 1,
      maxQueue: this.maxInFlight,
      idleTimeout: 60_000,
      workerData: { module: o.module },
      execArgv: threadExecArgv(entry, o.module),
    });
    // Piscina emits 'error' for a thread that dies with no task (e.g. a handler's stray timer threw after
    // its job ended); without a listener that would crash the process.
    this.piscina.on('error', (err: unknown) => this.report(err));
  }

  /** Tasks sent to threads and not finished yet. */
  get inFlight(): number {
    return this.tasks.size;
  }

  /** The live threads (for tests and diagnostics). */
  get threads(): number {
    return this.piscina.threads.length;
  }

  /** Imports the handlers module on this thread to read its kinds; no handler runs here. */
  async kinds(): Promise<JobKind[]> {
    const entries = await loadHandlerEntries(this.module);
    return entries.filter((e) => e.kind.execution === 'pool').map((e) => e.kind as JobKind);
  }

  /**
   * Runs `job` on a pool thread. Resolves when its handler succeeded, with its result as JSON text (undefined
   * when it returned nothing); rejects with what it threw, rebuilt as the same outcome class (RetryAfter,
   * Snooze, CancelJob, FailJob or an Error).
   */
  run(job: Job, signal: AbortSignal): Promise<string | undefined> {
    if (this.closed) return Promise.reject(new PoolThreadError('the worker-thread pool is closed'));
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<string | undefined>((resolve, reject) => {
      const run: Run = {
        job,
        signal,
        resolve,
        reject,
        onAbort: () => this.abort(run),
        task: null,
        index: 0,
        settled: false,
        graceTimer: null,
      };
      signal.addEventListener('abort', run.onAbort, { once: true });
      this.waiting.push(run);
      if (this.waiting.length >= this.maxBatch) this.pump();
      else if (this.batchDelayMs === 0) this.immediate ??= setImmediate(() => this.pump());
      else this.timer ??= setTimeout(() => this.pump(), this.batchDelayMs);
    });
  }

  /**
   * Refuses new jobs, fails those not yet sent to a thread, waits for running tasks (an aborted job
   * gets graceMs before its thread is terminated), then ends the threads.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.clearTimer();
    for (const run of this.waiting.splice(0))
      this.settle(run, new PoolThreadError('the worker-thread pool closed before this job started'), true);
    await Promise.all([...this.tasks].map((t) => t.done));
    await this.piscina.destroy();
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = null;
    this.immediate = null;
  }

  /** Sends waiting jobs while task slots are free, spreading them so every free slot gets work. */
  private pump(): void {
    this.clearTimer();
    while (this.waiting.length > 0 && this.tasks.size < this.maxInFlight && !this.closed) {
      const free = this.maxInFlight - this.tasks.size;
      const n = Math.min(this.maxBatch, Math.ceil(this.waiting.length / free));
      this.dispatch(this.waiting.splice(0, n));
    }
  }

  private dispatch(runs: Run[]): void {
    const { port1, port2 } = new MessageChannel();
    const task: Task = {
      runs,
      port: port1,
      started: false,
      kill: new AbortController(),
      culprit: null,
      problems: [],
      done: Promise.resolve(),
    };
    runs.forEach((run, i) => {
      run.task = task;
      run.index = i;
    });
    const jobs = ownBytes(packr.pack(runs.map((r) => r.job)));
    port1.on('message', (m: unknown) => this.onMessage(task, m));
    this.tasks.add(task);
    task.done = this.piscina
      .run({ jobs, port: port2 }, { transferList: [jobs.buffer, port2], signal: task.kill.signal })
      .then(
        (final: unknown) => this.finish(task, final, null),
        (err: unknown) => this.finish(task, null, err),
      );
  }

  /** The port listener: whatever arrives, it does not throw (a throw here would end the process). */
  private onMessage(task: Task, raw: unknown): void {
    try {
      this.handleMessage(task, raw);
    } catch (err) {
      // Not from the checks (they do not throw): from a 'log' or 'progress' listener of the host's user.
      this.report(err);
    }
  }

  /** onError, which must not throw from where it is called (a port listener, a task's settlement). */
  private report(err: unknown): void {
    try {
      this.options.onError?.(err);
    } catch (again) {
      console.error('[awa] pool executor: error while reporting an error:', again, err);
    }
  }

  private handleMessage(task: Task, raw: unknown): void {
    const m = checkThreadMessage(raw);
    switch (m.t) {
      case 'invalid':
        this.protocolProblem(task, m.problem);
        break;
      case 'start':
        task.started = true;
        break;
      case 'done':
        this.applyOutcomes(task, m.b);
        break;
      case 'log': {
        const run = task.runs[m.i];
        if (run) this.options.onLog?.(run.job.id, m.line);
        break;
      }
      case 'progress': {
        const run = task.runs[m.i];
        if (run && !run.settled) this.options.onProgress?.(run.job.id, run.job.runLease, m.v);
        break;
      }
    }
  }

  private applyOutcomes(task: Task, bytes: unknown): void {
    const { outcomes, problems } = readOutcomes(bytes, task.runs.length);
    for (const [i, outcome] of outcomes) {
      const run = task.runs[i]!;
      if (outcome.failed) this.settle(run, outcome.error, true);
      else this.settle(run, undefined, false, outcome.result);
    }
    for (const problem of problems) this.protocolProblem(task, problem);
  }

  /** Something from the thread could not be read: the jobs it concerned fail (see lostError); say so. */
  private protocolProblem(task: Task, problem: string): void {
    task.problems.push(problem);
    this.report(
      new PoolThreadError(`a pool thread sent something the coordinator could not read: ${problem}`),
    );
  }

  private finish(task: Task, final: unknown, err: unknown): void {
    // Messages the thread posted before its task ended (outcomes, logs) are already queued on the port,
    // whatever order the two channels deliver in: take them now, before judging what is missing.
    for (let m = receiveMessageOnPort(task.port); m; m = receiveMessageOnPort(task.port))
      this.onMessage(task, m.message);
    // null: every outcome went out early on the port.
    if (final !== null && final !== undefined) this.applyOutcomes(task, final);
    task.port.close();
    this.tasks.delete(task);
    for (const run of task.runs) if (!run.settled) this.settle(run, this.lostError(task, run, err), true);
    this.pump();
  }

  private lostError(task: Task, run: Run, err: unknown): Error {
    const culprit = task.culprit;
    if (culprit === run) {
      return new PoolThreadError(
        `the handler ignored its abort signal (${describeReason(run.signal.reason)}) for ${this.graceMs} ms; its worker thread was terminated`,
      );
    }
    if (culprit) {
      return new PoolThreadError(
        `its worker thread was terminated because job ${culprit.job.id} ignored its abort signal for ${this.graceMs} ms`,
      );
    }
    if (err) {
      const why = err instanceof Error ? err.message : String(err);
      return new PoolThreadError(`the worker thread running this job died: ${why}`, { cause: err });
    }
    if (task.problems.length > 0) {
      return new PoolThreadError(
        `the worker thread finished its batch without a readable outcome for this job (it sent: ${task.problems.join('; ')})`,
      );
    }
    return new PoolThreadError('the worker thread finished its batch without an outcome for this job');
  }

  private settle(run: Run, err: unknown, failed: boolean, result?: string): void {
    if (run.settled) return;
    run.settled = true;
    if (run.graceTimer) clearTimeout(run.graceTimer);
    run.signal.removeEventListener('abort', run.onAbort);
    if (failed) run.reject(err);
    else run.resolve(result);
  }

  /** The job's signal aborted: drop it if it never left, else tell its thread and start the grace clock. */
  private abort(run: Run): void {
    if (run.settled) return;
    const task = run.task;
    if (!task) {
      const at = this.waiting.indexOf(run);
      if (at >= 0) this.waiting.splice(at, 1);
      this.settle(run, run.signal.reason, true);
      return;
    }
    const reason: unknown = run.signal.reason;
    const msg: AbortMessage = {
      t: 'abort',
      i: run.index,
      name: reason instanceof Error ? reason.name : 'AbortError',
      message: describeReason(reason),
    };
    task.port.postMessage(msg);
    run.graceTimer = setTimeout(() => {
      if (run.settled) return;
      if (!task.started) {
        // Still queued behind another task: no thread to stop. The thread will skip this job.
        this.settle(run, reason, true);
        return;
      }
      task.culprit ??= run;
      task.kill.abort(
        new PoolThreadError(`job ${run.job.id} ignored its abort signal for ${this.graceMs} ms`),
      );
    }, this.graceMs);
  }
}

function describeReason(reason: unknown): string {
  if (reason instanceof Error) return reason.message;
  return reason === undefined ? 'aborted' : String(reason);
}

/**
 * Threads inherit this process's execArgv. When the entry point or the handlers module is TypeScript and
 * this process runs without tsx's loader (vitest, say), threads get it added so they can import them.
 */
function threadExecArgv(entry: string, module: string): string[] | undefined {
  const isTs = (s: string) => /\.[cm]?ts$/.test(s);
  if (!isTs(entry) && !isTs(module)) return undefined;
  if (process.execArgv.some((a) => a.includes('tsx'))) return undefined;
  try {
    const loader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
    return [...process.execArgv, '--import', loader];
  } catch {
    return undefined; // no tsx: the threads report the import error on every job
  }
}

/** Imports a handlers module (file URL or absolute path) and returns its defineHandler entries. */
export async function loadHandlerEntries(module: string): Promise<HandlerEntry[]> {
  const url = module.startsWith('file:') ? module : pathToFileURL(module).href;
  const mod = (await import(url)) as { handlers?: unknown; default?: unknown };
  const list = mod.handlers ?? mod.default;
  if (!Array.isArray(list)) {
    throw new InvalidOptionError(
      'threadPool.module',
      `${url} must export \`handlers\` (or a default export): an array of defineHandler(kind, fn)`,
    );
  }
  return list as HandlerEntry[];
}
