import type { Priority } from './validation.js';

/** One recorded failure of an attempt, kept in the job's history (newest 20). */
export interface AttemptError {
  attempt: number;
  at: string;
  error: string;
  name?: string;
  stack?: string;
}

/** A job as its handler sees it: one attempt of it. */
export interface Job<Args = unknown> {
  readonly id: string;
  readonly kind: string;
  readonly queue: string;
  readonly priority: Priority;
  readonly args: Args;
  /** 1 on the first attempt. */
  readonly attempt: number;
  readonly maxAttempts: number;
  /** Fencing token of this attempt; writes by an older attempt are ignored. */
  readonly runLease: number;
  readonly enqueuedAt: Date;
  /** When the job last became runnable (enqueue, or promotion from scheduled/retry). */
  readonly readyAt: Date;
  readonly metadata: Record<string, unknown>;
  readonly tags: readonly string[];
  readonly errors: readonly AttemptError[];
  /** Set when this attempt was resumed by an external callback: what the callback carried. */
  readonly callback?: { readonly payload: unknown; readonly at: string };
}

/** What a handler gets beside the job. */
export interface JobContext {
  /** Aborted when the attempt is cancelled, rescued, passes its deadline, or the host stops past its drain timeout. */
  readonly signal: AbortSignal;
  /** Records progress (any JSON value) for this attempt; written through the attempt's fence, coalesced. */
  progress(value: unknown): void;
  /**
   * Registers an external callback for this attempt and returns its token (hand it to the outside service).
   * Then either throw/return `new WaitForCallback()` to park the job (its permit is freed), or await
   * `waitForCallback(token)`. A later registration replaces the token. With `timeoutMs`, a parked job whose
   * callback does not come in time fails this attempt (retried like any failure). Inline kinds only.
   */
  registerCallback(options?: { timeoutMs?: number }): Promise<string>;
  /**
   * Waits inside the handler for the callback of `token` (registered by this attempt), holding the permit:
   * resolves with its payload (complete, resume), rejects with ExternalFailure (fail), RetryAfter (retry
   * with a delay), CancelJob (cancel), CallbackTimeout (timeoutMs passed), or the abort reason.
   */
  waitForCallback(token: string, options?: { timeoutMs?: number }): Promise<unknown>;
}

export type JobHandler<Args = unknown> = (job: Job<Args>, ctx: JobContext) => unknown;

export type JobState =
  | 'available'
  | 'scheduled'
  | 'retryable'
  | 'running'
  | 'completed'
  | 'failed'
  | 'cancelled'
  /** Failed for good in a DLQ-enabled queue: held for an operator to retry or purge. */
  | 'dlq'
  /** Parked until an external callback arrives (see docs/callbacks.md). */
  | 'waiting_external';

/** Every state a job can be in, for validating filters. */
export const JOB_STATES: readonly JobState[] = [
  'available',
  'scheduled',
  'retryable',
  'running',
  'waiting_external',
  'completed',
  'failed',
  'cancelled',
  'dlq',
];
