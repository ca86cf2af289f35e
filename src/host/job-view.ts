import type { AttemptError, Job } from '../model/job.js';
import type { ClaimedJob } from '../storage/index.js';

/** The handler's view of a claimed attempt. */
export function jobView(queue: string, c: ClaimedJob): Job {
  const meta = c.meta;
  return {
    id: c.id,
    kind: c.kind,
    queue,
    priority: c.priority,
    args: c.args,
    attempt: c.attempt,
    maxAttempts: c.maxAttempts,
    runLease: c.runLease,
    enqueuedAt: new Date(c.enqueuedAtMs),
    readyAt: new Date(c.readyAtMs),
    metadata: meta?.metadata ?? {},
    tags: meta?.tags ?? [],
    errors: (meta?.errors as AttemptError[] | undefined) ?? [],
    ...(meta?.callback ? { callback: meta.callback as Job['callback'] & object } : {}),
  };
}
