import type { ClientBase } from 'pg';
import type { JobOptions } from './enqueue-options.js';
import type { DependencyOutcome } from './flow.js';
import type { JobKind } from './job-kind.js';
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
  /**
   * A durable step (docs/durable-steps.md): runs `fn` once per job across retries, rescues and sleeps. When it
   * resolves, its value (JSON, at most 64 KiB; undefined allowed) is recorded through the attempt's fence before
   * step() returns it; a later attempt calling step() with the same name gets the recorded value back without
   * running `fn`. A step that throws records nothing and runs again next attempt. Names are unique per job
   * (DuplicateStepError), at most 200 characters, not starting with "awa:"; a job records at most 1,000 steps
   * (StepLimitError). Rejects with AWA_ATTEMPT_CLOSED when this attempt no longer holds the job. Inline kinds only.
   */
  step<T>(name: string, fn: () => T | PromiseLike<T>): Promise<T>;
  /**
   * Parks the job for `ms` without holding a permit, then runs its handler again from the top: recorded steps
   * replay, and this sleep, its wake time recorded like a step, returns at once. Code before it that is not in a
   * step runs again. On the call that parks, the attempt ends as a snooze (no attempt spent) and the promise
   * rejects with a Snooze: let it propagate. `name` identifies the sleep across runs (default: its place among
   * the handler's unnamed sleeps). Inline kinds only.
   */
  sleep(ms: number, options?: { name?: string }): Promise<void>;
  /** sleep() until a time rather than for a time. */
  sleepUntil(at: Date, options?: { name?: string }): Promise<void>;
  /**
   * Runs `fn` in a transaction on a connection of the host's pool, and completes the job in that same
   * transaction (its result: what `fn` returned), guarded by this attempt's lease: the handler's writes and the
   * completion commit together or not at all, and an attempt that no longer holds the job (cancelled, rescued)
   * commits nothing (rejects with AWA_ATTEMPT_CLOSED). Once it resolves the job has completed: what the handler
   * returns or throws afterwards is ignored. Once per attempt. Inline kinds only. See docs/flows.md, "Settling
   * in the handler's transaction".
   */
  transaction<T>(fn: (tx: ClientBase) => Promise<T>): Promise<T>;
  /** The jobs this job was enqueued to run after (docs/flows.md, "Dependencies"): how each ended and its
   * stored result. Empty for a job outside a flow. */
  dependencies(): Promise<DependencyOutcome[]>;
  /**
   * Enqueues child jobs once per job: `name` identifies this spawn across runs (a replay of the handler gets the
   * same ids back, spawns nothing), each child runs as any job does, and this job may wait for them with
   * waitForChildren(). Returns their ids in order. Inline kinds only.
   */
  spawn(name: string, jobs: readonly ChildJobInput[]): Promise<string[]>;
  /**
   * Resolves with how each child this job spawned ended (and its result) once all have; until then parks the job
   * without holding a permit (it rejects with WaitForChildren: let it propagate) and the handler runs again from
   * the top when the last child ends: recorded steps and spawns replay. Inline kinds only.
   */
  waitForChildren(): Promise<DependencyOutcome[]>;
}

/** A child job for ctx.spawn(): `name` (default its position) names it in the flow. */
export interface ChildJobInput<Args = unknown> {
  name?: string;
  kind: JobKind<Args> | string;
  args: Args;
  options?: Omit<JobOptions, 'unique'>;
}

/** A handler: what it returns (or resolves with) is the job's result, stored with its completion when it is not
 * undefined or null (docs/flows.md, "Results"); `Result` is the kind's result type. */
export type JobHandler<Args = unknown, Result = unknown> = (
  job: Job<Args>,
  ctx: JobContext,
) => Result | PromiseLike<Result>;

export { JOB_STATES, type JobState } from './job-state.js';
