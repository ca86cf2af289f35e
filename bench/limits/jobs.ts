// Job kinds, config and log lines shared by the limited host process (bench/limits/host.ts), the fleet it is
// run in (bench/limits/fleet.ts), the `limits` bench scenario and the flow-control chaos test
// (test/chaos/flow-control-fleet.test.ts). Importing this module starts nothing.
import { defineJob, type QueueOptions } from '../../src/index.js';

/** The args of every job these runs enqueue: the key is `tenant` (limits.key.arg). */
export interface LimitedArgs {
  tenant: string;
  /** Overrides the process's sleepMs. */
  sleepMs?: number;
}

/** One kind per queue, so one process can serve a rate-limited, a key-concurrency-limited and a free queue. */
export const limitedRate = defineJob<LimitedArgs>({ kind: 'limited_rate', queue: 'rate', maxAttempts: 5 });
export const limitedKeys = defineJob<LimitedArgs>({ kind: 'limited_keys', queue: 'keys', maxAttempts: 5 });
export const limitedFree = defineJob<LimitedArgs>({ kind: 'limited_free', queue: 'free', maxAttempts: 5 });
export const LIMITED_KINDS = { rate: limitedRate, keys: limitedKeys, free: limitedFree } as const;
export type LimitedQueue = keyof typeof LIMITED_KINDS;

export interface LimitedHostConfig {
  url: string;
  schema?: string;
  instanceId: string;
  /** File the JSON lines are appended to. */
  log: string;
  /** The queues this process serves, with their options (limits declared here). */
  queues: Partial<Record<LimitedQueue, QueueOptions>>;
  /** Milliseconds every handler call sleeps unless its args say otherwise (0: returns at once). */
  sleepMs: number;
  /** 'sync': a line per attempt start, written before the handler goes on (a SIGKILL loses none);
   * 'buffered': written every 200 ms (cheaper; a SIGKILL loses the last ones); 'none'. */
  startLog: 'sync' | 'buffered' | 'none';
  /** The chaos suite's short heartbeat / rescue timings, so a killed host's attempts come back in seconds. */
  short: boolean;
  /** The ring's rotation interval; a long one keeps every finished job's row readable in the jobs view after
   * the run (default: the host's). */
  ringIntervalMs?: number;
  /** Rows a ring slot takes before it may turn (0: it turns at every interval, as in the chaos suite). */
  ringSlotMinRows?: number;
}

/** One line of a limited host's log. */
export type LimitedLine =
  | { event: 'ready'; instance: string; pid: number; t: number }
  /** Attempts started by the handler: [jobId, attempt, tenant, queue, handler clock ms] each. */
  | { event: 'starts'; starts: [string, number, string, string, number][]; pid: number; t: number }
  | {
      event: 'rescue';
      rescued: { jobId: string; runLease: number; instanceId: string }[];
      pid: number;
      t: number;
    }
  /** Claimed jobs this host gave back unstarted (held ahead of a permit too long, or at stop), once the
   * database accepted it: a snooze, no attempt spent. Each is a receipt member that did not run. */
  | { event: 'handback'; jobIds: string[]; pid: number; t: number }
  /** The leader pruned a ring slot, or carried its open rows forward first. */
  | { event: 'prune'; slot: number | null; outcome: string; carried?: number; pid: number; t: number }
  | { event: 'error'; message: string; pid: number; t: number }
  | { event: 'stopped'; pid: number; t: number };
