import { AwaError } from '../model/errors.js';
import type { ClientBase } from 'pg';
import type { DependencyOutcome } from '../model/flow.js';
import type { ChildJobInput, JobContext } from '../model/job.js';
import { encodeProgress } from '../model/payload.js';
import { wakeAfter, wakeAt } from '../model/steps.js';
import type { AttemptRef, ProgressWrite } from '../storage/index.js';
import type { Attempt } from './attempts.js';
import { inTransaction, spawnChildren, waitForChildren, type FlowDeps } from './job-flow.js';
import { AttemptSteps, type StepDeps } from './job-steps.js';

// The context a handler gets beside its job: its attempt's abort signal, progress reporting, external
// callbacks (registration through the attempt's fence, waits served by CallbackWaits), durable steps and
// sleeps (AttemptSteps, made at the attempt's first step), and its reach into its own transaction and its flow
// (job-flow.ts).

export interface ContextDeps extends StepDeps, FlowDeps {
  reportProgress(w: ProgressWrite): void;
  registerCallback(a: AttemptRef, timeoutMs: number): Promise<string | null>;
  /** A callback was registered for this attempt (telemetry). */
  callbackRegistered(attempt: Attempt): void;
  waitForCallback(jobId: string, runLease: number, timeoutMs: number, signal: AbortSignal): Promise<unknown>;
}

/**
 * The context of one attempt. Its members are getters that make their function when read: a handler that
 * never touches its context (most short ones) costs one small object, not four closures and a reference built
 * for every job, and a handler that destructures it (`async (job, { signal, progress }) => …`) still gets
 * functions that need no `this`.
 */
class AttemptContext implements JobContext {
  private steps: AttemptSteps | null = null;

  constructor(
    private readonly attempt: Attempt,
    private readonly deps: ContextDeps,
  ) {}

  get signal(): AbortSignal {
    return this.attempt.signal;
  }

  get progress(): (value: unknown) => void {
    const ref = attemptRef(this.attempt);
    const kind = this.attempt.job.kind;
    // Encoded now: a value that cannot be stored throws at the handler's call, not in a write later.
    return (value) => this.deps.reportProgress({ ...ref, progressJson: encodeProgress(kind, value) });
  }

  get registerCallback(): (options?: { timeoutMs?: number }) => Promise<string> {
    const { attempt, deps } = this;
    return async (options) => {
      const timeoutMs = timeoutOption(options);
      const token = await deps.registerCallback(attemptRef(attempt), timeoutMs);
      if (!token) {
        throw new AwaError(
          'AWA_ATTEMPT_CLOSED',
          `Attempt ${attempt.job.runLease} of job ${attempt.job.id} is no longer open (cancelled, rescued or settled): no callback was registered.`,
        );
      }
      attempt.callbackToken = token;
      deps.callbackRegistered(attempt);
      return token;
    };
  }

  get waitForCallback(): (token: string, options?: { timeoutMs?: number }) => Promise<unknown> {
    const { attempt, deps } = this;
    return (token, options) => {
      if (token !== attempt.callbackToken) {
        return Promise.reject(
          new AwaError(
            'AWA_INVALID_CALLBACK',
            `waitForCallback(${JSON.stringify(token)}): not the callback this attempt registered last; call ctx.registerCallback() first and wait for its token.`,
          ),
        );
      }
      return deps.waitForCallback(
        attempt.job.id,
        attempt.job.runLease,
        timeoutOption(options),
        attempt.signal,
      );
    };
  }

  get step(): <T>(name: string, fn: () => T | PromiseLike<T>) => Promise<T> {
    return (name, fn) => this.stepsOf().step(name, fn);
  }

  get sleep(): (ms: number, options?: { name?: string }) => Promise<void> {
    return async (ms, options) => this.stepsOf().sleepUntil(wakeAfter(ms, Date.now()), options?.name);
  }

  get sleepUntil(): (at: Date, options?: { name?: string }) => Promise<void> {
    return async (at, options) => this.stepsOf().sleepUntil(wakeAt(at, Date.now()), options?.name);
  }

  get transaction(): <T>(fn: (tx: ClientBase) => Promise<T>) => Promise<T> {
    return (fn) => inTransaction(this.attempt, this.deps, fn);
  }

  get dependencies(): () => Promise<DependencyOutcome[]> {
    return async () => (await this.deps.dependenciesOf(this.attempt.job.id)).filter((d) => !d.spawned);
  }

  get spawn(): (name: string, jobs: readonly ChildJobInput[]) => Promise<string[]> {
    return (name, jobs) => spawnChildren(this.attempt, attemptRef(this.attempt), this.deps, name, jobs);
  }

  get waitForChildren(): () => Promise<DependencyOutcome[]> {
    return () => waitForChildren(this.attempt, this.deps);
  }

  private stepsOf(): AttemptSteps {
    this.steps ??= new AttemptSteps(this.attempt, attemptRef(this.attempt), this.deps);
    return this.steps;
  }
}

export function jobContext(attempt: Attempt, deps: ContextDeps): JobContext {
  return new AttemptContext(attempt, deps);
}

function attemptRef({ batch, job }: Attempt): AttemptRef {
  return {
    claimSlot: batch.claimSlot,
    batchId: batch.batchId,
    idx: job.idx,
    jobId: job.id,
    runLease: job.runLease,
  };
}

function timeoutOption(options: { timeoutMs?: number } | undefined): number {
  const ms = options?.timeoutMs ?? 0;
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 0 || ms > 30 * 86_400_000) {
    throw new AwaError(
      'AWA_INVALID_OPTION',
      `timeoutMs must be an integer from 0 (none) to 30 days in ms, got ${String(ms)}`,
    );
  }
  return ms;
}
