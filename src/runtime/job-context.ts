import { AwaError } from '../model/errors.js';
import type { JobContext } from '../model/job.js';
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

export function jobContext(attempt: Attempt, deps: ContextDeps): JobContext {
  const { batch, job } = attempt;
  const ref: AttemptRef = {
    claimSlot: batch.claimSlot,
    batchId: batch.batchId,
    idx: job.idx,
    jobId: job.id,
    runLease: job.runLease,
  };
  return {
    get signal() {
      return attempt.signal;
    },
    progress(value: unknown) {
      deps.reportProgress({ ...ref, progress: value });
    },
    async registerCallback(options?: { timeoutMs?: number }) {
      const timeoutMs = timeoutOption(options);
      const token = await deps.registerCallback(ref, timeoutMs);
      if (!token) {
        throw new AwaError(
          'AWA_ATTEMPT_CLOSED',
          `Attempt ${job.runLease} of job ${job.id} is no longer open (cancelled, rescued or settled): no callback was registered.`,
        );
      }
      attempt.callbackToken = token;
      deps.callbackRegistered(attempt);
      return token;
    },
    waitForCallback(token: string, options?: { timeoutMs?: number }) {
      if (token !== attempt.callbackToken) {
        return Promise.reject(
          new AwaError(
            'AWA_INVALID_CALLBACK',
            `waitForCallback(${JSON.stringify(token)}): not the callback this attempt registered last; call ctx.registerCallback() first and wait for its token.`,
          ),
        );
      }
      return deps.waitForCallback(job.id, job.runLease, timeoutOption(options), attempt.signal);
    },
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
