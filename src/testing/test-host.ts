import { messageOf } from '../model/errors.js';
import type { HandlerEntry } from '../model/handler.js';
import type { Job } from '../model/job.js';
import type { QueueOptions } from '../host/config.js';
import { WorkerHost } from '../host/worker-host.js';
import type { Settlement } from '../storage/index.js';
import { watched } from './handlers.js';
import type { TestSchema } from './test-schema.js';

// The worker host the test helpers run jobs with: a real WorkerHost (claims, attempt runner, settle batcher)
// on the test schema, with quick polls, and no part in maintenance: the helpers promote due jobs themselves,
// when they choose, so no election or maintenance tick decides when a retry runs. It records what it settled
// and the errors it reported (instead of printing them).

/** A settlement as the helpers report it: the job, its kind and queue, and what became of the attempt. */
export interface SettledAttempt {
  jobId: string;
  kind: string;
  queue: string;
  outcome: Settlement['outcome'];
  /** false: the fence refused it (the attempt was cancelled or rescued while it ran). */
  accepted: boolean;
  settlement: Settlement;
}

export interface TestHostOptions {
  handlers: readonly HandlerEntry[];
  queues: Record<string, QueueOptions>;
  /** How long stop() lets running handlers finish before it aborts their signals. */
  shutdownTimeoutMs: number;
  claimBatchSize?: number;
  /** Told of each job as its handler starts; a promise it returns holds the handler back until it resolves. */
  onStart?(job: Job): Promise<void> | void;
  /** Told of each settlement once the database has answered for it. */
  onSettled?(settled: SettledAttempt): void;
}

export class TestHost {
  readonly host: WorkerHost;
  readonly errors: unknown[] = [];
  /** Kind and queue of each job started, for settlements the host reports without them. */
  private readonly started = new Map<string, { kind: string; queue: string }>();

  constructor(t: TestSchema, o: TestHostOptions) {
    this.host = new WorkerHost({
      connectionString: t.connectionString,
      schema: t.schema,
      queues: o.queues,
      maintenance: false,
      pollIntervalMs: 10,
      claimBatchSize: o.claimBatchSize ?? 10,
      shutdownTimeoutMs: o.shutdownTimeoutMs,
      // A kind without a handler is handed back this long: past any drain, so it is reported, not retried.
      unknownKindDelayMs: 86_400_000,
    });
    this.host.registerAll(
      watched(o.handlers, (job) => {
        this.started.set(job.id, { kind: job.kind, queue: job.queue });
        return o.onStart?.(job);
      }) as unknown as HandlerEntry<never>[],
    );
    this.host.on('error', (err) => this.errors.push(err));
    this.host.on('settled', (s, accepted) => o.onSettled?.(this.describe(s, accepted)));
  }

  /** The errors the host reported, one per line, for a message. */
  errorLines(): string {
    if (this.errors.length === 0) return '';
    return `\nThe worker host reported:\n${this.errors.map((e) => `  ${messageOf(e)}`).join('\n')}`;
  }

  private describe(s: Settlement, accepted: boolean): SettledAttempt {
    // The host's settlements carry their kind and queue; a job it never started is known only from them.
    const own = s as Settlement & { kind?: string; queue?: string };
    const seen = this.started.get(s.jobId);
    return {
      jobId: s.jobId,
      kind: seen?.kind ?? own.kind ?? 'unknown',
      queue: seen?.queue ?? own.queue ?? 'unknown',
      outcome: s.outcome,
      accepted,
      settlement: s,
    };
  }
}
