import { AwaError } from '../model/errors.js';
import type { JobContext } from '../model/job.js';
import { encodeProgress } from '../model/payload.js';
import type { AttemptRef, ProgressWrite } from '../storage/index.js';
import type { Attempt } from './attempts.js';

// The context a handler gets beside its job: its attempt's abort signal, progress reporting, and external
// callbacks (registration through the attempt's fence, waits served by CallbackWaits).

export interface ContextDeps {
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
