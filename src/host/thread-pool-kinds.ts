import type { JobContext } from '../model/job.js';
import { EncodedResult } from '../model/result.js';
import type { ResolvedThreadPool } from '../threads/config.js';
import { PoolExecutor } from '../threads/pool-executor.js';
import type { HandlerRegistry } from './registry.js';

// The worker-thread pool as a host sees it: the pool's kinds registered as handlers that run each job in a
// thread, and the threads' progress reports routed to the context of the attempt they belong to (a report
// of an attempt that has ended, or of an older lease of the same job, goes nowhere).

export interface ThreadPoolEvents {
  /** A line a handler wrote with ctx.log(...). */
  log(jobId: string, line: string): void;
  /** A progress report, after the attempt's context took it. */
  progress(jobId: string, runLease: number, value: unknown): void;
  /** A pool-level problem, or a progress value that could not be stored. */
  error(err: unknown): void;
}

/** Starts the pool and registers its kinds (the handler module is imported in the host only to read
 * them: the handlers run in the threads). Returns the executor, for the host to close. */
export async function startThreadPoolKinds(
  config: ResolvedThreadPool,
  registry: HandlerRegistry,
  events: ThreadPoolEvents,
): Promise<PoolExecutor> {
  const running = new Map<string, { runLease: number; ctx: JobContext }>();
  const executor = new PoolExecutor({
    ...config,
    onLog: (jobId, line) => events.log(jobId, line),
    onProgress: (jobId, runLease, value) => {
      const run = running.get(jobId);
      try {
        if (run?.runLease === runLease) run.ctx.progress(value);
      } catch (err) {
        // The thread checked it already; a value that still cannot be stored is reported, not thrown here.
        events.error(err);
      }
      events.progress(jobId, runLease, value);
    },
    onError: (err) => events.error(err),
  });
  try {
    for (const kind of await executor.kinds()) {
      registry.add(kind, async (job, ctx) => {
        running.set(job.id, { runLease: job.runLease, ctx });
        try {
          const result = await executor.run(job, ctx.signal);
          // Encoded in the thread: the attempt runner stores the text as it is.
          return result === undefined ? undefined : new EncodedResult(result);
        } finally {
          if (running.get(job.id)?.ctx === ctx) running.delete(job.id);
        }
      });
    }
  } catch (err) {
    await executor.close().catch(() => {});
    throw err;
  }
  return executor;
}
