import type { AttemptError } from '../model/job.js';
import type { JobRecord } from '../storage/index.js';
import type { SettledAttempt } from './test-host.js';

// What runJob() reports: how the attempt ended, in the settle outcomes' words (a WaitForCallback attempt is
// parked), with what each outcome carries and the job as getJob() shows it afterwards.

export type JobRun =
  | { outcome: 'completed'; job: JobRecord }
  /** Retried: `runAt` is when it runs again (RetryAfter's delay, or the backoff rule's). */
  | { outcome: 'retry'; runAt: Date; error: AttemptError; job: JobRecord }
  /** Snoozed: runs again at `runAt`, no attempt spent. */
  | { outcome: 'snooze'; runAt: Date; job: JobRecord }
  /** Failed for good (FailJob, or its last attempt failed); `job.state` is "dlq" in a DLQ queue. */
  | { outcome: 'failed'; error: AttemptError; job: JobRecord }
  /** CancelJob, or cancelled by an operator while it ran (`error` is null then). */
  | { outcome: 'cancelled'; error: AttemptError | null; job: JobRecord }
  /** WaitForCallback: parked until a callback with `token` arrives (client.completeExternal(token, …)). */
  | { outcome: 'parked'; token: string; job: JobRecord }
  /** ctx.waitForChildren() while its children run: blocked until they have all ended, no attempt spent. */
  | { outcome: 'blocked'; job: JobRecord };

export type JobRunOutcome = JobRun['outcome'];

/** The run, from the attempt's settlement (when the fence accepted it) or else from where the job now stands. */
export function jobRun(settled: SettledAttempt, job: JobRecord, token: string | null): JobRun {
  const error = (settled.settlement.error as AttemptError | undefined) ?? lastError(job);
  const runAt = settled.settlement.runAt ?? job.runAt;
  switch (settled.accepted ? settled.outcome : stateOutcome(job)) {
    case 'completed':
      return { outcome: 'completed', job };
    case 'retry':
      return { outcome: 'retry', runAt: runAt!, error: error!, job };
    case 'snooze':
      return { outcome: 'snooze', runAt: runAt!, job };
    case 'failed':
      return { outcome: 'failed', error: error!, job };
    case 'wait':
      return { outcome: 'parked', token: token!, job };
    case 'block':
      return { outcome: 'blocked', job };
    default:
      return { outcome: 'cancelled', error: settled.accepted ? (error ?? null) : null, job };
  }
}

function lastError(job: JobRecord): AttemptError | undefined {
  return job.meta?.errors?.at(-1);
}

/** What became of an attempt whose settlement the fence refused: someone else settled it. */
function stateOutcome(job: JobRecord): SettledAttempt['outcome'] {
  switch (job.state) {
    case 'completed':
      return 'completed';
    case 'retryable':
      return 'retry';
    case 'scheduled':
      return 'snooze';
    case 'failed':
    case 'dlq':
      return 'failed';
    case 'waiting_external':
      return 'wait';
    default:
      return 'cancelled';
  }
}
