import type { QueueCounts } from '../storage/index.js';
import type { JobRunOutcome } from './job-run.js';
import type { SettledAttempt } from './test-host.js';

// What drainQueue() reports: each attempt it settled, counted by outcome, and what its queues still hold.

/** A settle outcome, or a job handed back unstarted because no handler given to the drain runs its kind. */
export type DrainOutcome = JobRunOutcome | 'handedBack';

export interface DrainedAttempt {
  jobId: string;
  kind: string;
  queue: string;
  outcome: DrainOutcome;
  /** false: the fence refused it (the attempt was cancelled or rescued while it ran). */
  accepted: boolean;
}

export interface DrainLeft {
  /** Runnable now: only non-zero in a DrainIncompleteError's result. */
  available: number;
  running: number;
  /** Waiting for a run time that the clock has not reached: scheduled, snoozed… */
  scheduled: number;
  /** …and retries waiting out their backoff. */
  retryable: number;
  /** Parked until a callback. */
  waiting: number;
  dlq: number;
  /** How long until the next of those falls due (callback timeouts included); null when none waits for a time. */
  nextDueInMs: number | null;
}

export interface DrainResult {
  /** Attempts settled, by outcome. Settlements the fence refused (an attempt cancelled while it ran) are not
   * counted: the job ended as whoever settled it said. */
  outcomes: Record<DrainOutcome, number>;
  /** Every settlement, in the order the database answered for them (a parked attempt whose callback timed out
   * is one too: a retry, or a failure when it was the last attempt). */
  settled: DrainedAttempt[];
  /** How far the drain advanced the test schema's clock (`advanceUpToMs`). */
  advancedMs: number;
  /** What the drained queues hold at the end. */
  left: DrainLeft;
}

export function emptyResult(): DrainResult {
  return {
    outcomes: {
      completed: 0,
      retry: 0,
      snooze: 0,
      failed: 0,
      cancelled: 0,
      parked: 0,
      blocked: 0,
      handedBack: 0,
    },
    settled: [],
    advancedMs: 0,
    left: {
      available: 0,
      running: 0,
      scheduled: 0,
      retryable: 0,
      waiting: 0,
      dlq: 0,
      nextDueInMs: null,
    },
  };
}

/** Adds one settlement; `handled` says which kinds the drain has handlers for. */
export function record(result: DrainResult, s: SettledAttempt, handled: ReadonlySet<string>): void {
  const outcome: DrainOutcome =
    s.outcome === 'wait'
      ? 'parked'
      : s.outcome === 'block'
        ? 'blocked'
        : s.outcome === 'snooze' && !handled.has(s.kind)
          ? 'handedBack'
          : s.outcome;
  result.settled.push({ jobId: s.jobId, kind: s.kind, queue: s.queue, outcome, accepted: s.accepted });
  if (s.accepted) result.outcomes[outcome]++;
}

/** Adds a parked attempt whose callback timed out (the drain expired it): a failed attempt, retried or not. */
export function recordTimedOut(
  result: DrainResult,
  job: { jobId: string; kind: string; queue: string },
  retried: boolean,
): void {
  const outcome = retried ? 'retry' : 'failed';
  result.settled.push({ ...job, outcome, accepted: true });
  result.outcomes[outcome]++;
}

/** The counts of `queues`, summed. */
export function leftIn(
  counts: readonly QueueCounts[],
  queues: readonly string[],
  nextDueInMs: number | null,
): DrainLeft {
  const left: DrainLeft = { ...emptyResult().left, nextDueInMs };
  for (const c of counts.filter((x) => queues.includes(x.queue))) {
    left.available += c.available;
    left.running += c.running;
    left.scheduled += c.scheduled;
    left.retryable += c.retryable;
    left.waiting += c.waiting;
    left.dlq += c.dlq;
  }
  return left;
}
