// What a benchmark worker process (worker-process.ts) is told, and what it says back on stdout (with how
// its usage figures are taken).

export interface WorkerProcessConfig {
  url: string;
  schema?: string;
  /** The host's instance id (default: a random one). */
  instanceId?: string;
  queue: string;
  kind: string;
  concurrency: number;
  /** The queue's `prefetch` (absent: the host's default). */
  prefetch?: number;
  /** The handler sleeps this long; 0 makes it a no-op. */
  sleepMs: number;
  /** Load (modules imported, host built), say `ready`, and start the host only on a `go` line on stdin. */
  waitForGo?: boolean;
  /** Write a `progress` line (jobs completed so far) this often; 0 or absent: never. */
  progressEveryMs?: number;
  /** Write a line per attempt start and end. */
  logAttempts?: boolean;
}

/** What a process's worker host has cost since it started: CPU time of the whole process (user + system,
 * microseconds), claim calls (and the time they took, ms) and settle flushes. */
export interface WorkerUsage {
  cpuUs: number;
  claimCalls: number;
  claimMs: number;
  flushes: number;
}

export const NO_USAGE: WorkerUsage = Object.freeze({ cpuUs: 0, claimCalls: 0, claimMs: 0, flushes: 0 });

/** A host's usage: this process's CPU since `since` (process.cpuUsage() when the host started) and the
 * host's own counts. */
export function hostUsage(
  stats: { claimCalls: number; claimMs: number; flushes: number },
  since: NodeJS.CpuUsage,
): WorkerUsage {
  const cpu = process.cpuUsage(since);
  return {
    cpuUs: cpu.user + cpu.system,
    claimCalls: stats.claimCalls,
    claimMs: stats.claimMs,
    flushes: stats.flushes,
  };
}

export type WorkerEvent =
  | { event: 'ready' }
  | { event: 'start' | 'end'; id: string; attempt: number }
  | { event: 'leadership'; isLeader: boolean }
  | { event: 'rescue'; rescued: { jobId: string; instanceId: string }[] }
  | { event: 'progress' | 'stopped'; completed: number; usage: WorkerUsage }
  | { event: 'error'; message: string };

/** A line as received: the event and the child's clock when it was written. */
export type WorkerLine = WorkerEvent & { t: number };
