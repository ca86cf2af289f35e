// Every error Awa throws on purpose is an AwaError with a stable `code`, so callers can branch on
// `err.code` without parsing messages. Messages say what to do next.

export type AwaErrorCode =
  | 'AWA_INVALID_ARGS'
  | 'AWA_INVALID_OPTION'
  | 'AWA_INVALID_CONFIG'
  | 'AWA_INVALID_REQUEST'
  | 'AWA_PAYLOAD_TOO_LARGE'
  | 'AWA_PAYLOAD_NOT_SERIALISABLE'
  | 'AWA_UNKNOWN_KIND'
  | 'AWA_CONNECTION_FAILED'
  | 'AWA_DATABASE_UNRESPONSIVE'
  | 'AWA_DATABASE_READ_ONLY'
  | 'AWA_EVENT_LOOP_BLOCKED'
  | 'AWA_SCHEMA_NOT_MIGRATED'
  | 'AWA_SCHEMA_TOO_NEW'
  | 'AWA_MIGRATION_FAILED'
  | 'AWA_DATABASE_ERROR'
  | 'AWA_HOST_STATE'
  | 'AWA_INSTANCE_REREGISTERED'
  | 'AWA_CLAIM_LOST'
  | 'AWA_LISTENER_FAILED'
  | 'AWA_LEADER_UNSEATED'
  | 'AWA_POLLING_FALLBACK'
  | 'AWA_TRANSACTION_REQUIRED'
  | 'AWA_CLIENT_CLOSED'
  | 'AWA_ATTEMPT_CLOSED'
  | 'AWA_INVALID_CALLBACK'
  | 'AWA_UNKNOWN_QUEUE'
  | 'AWA_QUEUE_IN_USE'
  | 'AWA_EMBEDDED_START_FAILED'
  | 'AWA_JOB_NOT_FOUND'
  | 'AWA_JOB_NOT_COMPLETED'
  | 'AWA_RESULT_TIMEOUT'
  // Durable steps (ctx.step, ctx.sleep: src/model/steps.ts).
  | 'AWA_INVALID_STEP'
  | 'AWA_DUPLICATE_STEP'
  | 'AWA_STEP_LIMIT'
  | 'AWA_STEPS_NEED_INLINE'
  // The test helpers' (awa-node/testing, src/testing/errors.ts).
  | 'AWA_TEST_ASSERTION'
  | 'AWA_TEST_TIMEOUT'
  | 'AWA_TEST_NOT_DRAINED'
  | 'AWA_TEST_CANNOT_RUN';

/** A thrown value's message for an error or a log line. Never throws, whatever was thrown (a getter or proxy
 * trap that throws, an object with no printable form). */
export function messageOf(err: unknown): string {
  try {
    return String(err instanceof Error ? err.message : err);
  } catch {
    return `a ${typeof err} that cannot be printed`;
  }
}

export class AwaError extends Error {
  readonly code: AwaErrorCode;
  constructor(code: AwaErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/**
 * A worker host told its connections lead through a transaction-mode pooler, with no direct connection for what
 * needs a session of its own: it polls instead of LISTENing and, when it would take part in maintenance, does
 * not stand for leadership. Not thrown: the host emits it once, as a `warning` event, and carries on.
 */
export class PollingFallbackWarning extends AwaError {
  /** The option that gives the host its sessions. */
  readonly field = 'sessionConnectionString';
  constructor(
    readonly pollIntervalMs: number,
    /** How often the host looks up its handlers' callback waits instead of hearing of their callbacks. */
    readonly callbackPollMs: number,
    /** True when the host would have stood for maintenance leadership (`maintenance` is on). */
    readonly skipsLeadership: boolean,
  ) {
    super(
      'AWA_POLLING_FALLBACK',
      `pooler is 'transaction' and no sessionConnectionString is given, so this host opens no session through ` +
        `the pooler: it polls each queue every ${pollIntervalMs} ms instead of LISTENing for new jobs (a new job ` +
        `may wait that long), looks up callback waits every ${callbackPollMs} ms, and does not abort the handler ` +
        `of an attempt cancelled or rescued elsewhere (its result is fenced out)` +
        (skipsLeadership
          ? '; it does not stand for maintenance leadership either (promotion of scheduled and retried jobs, ' +
            'rescue, ring rotation and prune, cron): at least one host must have a direct connection, or none of ' +
            'that runs'
          : '') +
        '. Pass sessionConnectionString, a postgres:// URL that reaches PostgreSQL directly (not through the ' +
        'pooler), for LISTEN and the leader lock.',
    );
  }
}

/** Job args failed the kind's schema, or are not a JSON object/array. */
export class InvalidArgsError extends AwaError {
  readonly kind: string;
  readonly issues: readonly { message: string; path?: string }[];
  constructor(kind: string, issues: readonly { message: string; path?: string }[]) {
    const detail = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; ');
    super(
      'AWA_INVALID_ARGS',
      `Invalid args for job kind "${kind}": ${detail}. Fix the args or the kind's schema.`,
    );
    this.kind = kind;
    this.issues = issues;
  }
}

/** An enqueue or worker option is out of range or of the wrong type; `field` names it. */
export class InvalidOptionError extends AwaError {
  readonly field: string;
  constructor(field: string, message: string) {
    super('AWA_INVALID_OPTION', `Invalid option "${field}": ${message}`);
    this.field = field;
  }
}

/** What a payload error is about: a job's args (the default), a handler's progress report, its result, or the
 * value of one of its durable steps. */
export type PayloadSubject = 'Args' | 'Progress' | 'Result' | 'Step result';

export class PayloadTooLargeError extends AwaError {
  constructor(kind: string, bytes: number, limit: number, subject: PayloadSubject = 'Args') {
    super(
      'AWA_PAYLOAD_TOO_LARGE',
      `${subject} for job kind "${kind}" ${subject === 'Args' ? 'are' : 'is'} ${bytes} bytes encoded; the limit is ${limit}. ` +
        (subject === 'Args'
          ? 'Store large data elsewhere and pass a reference, or raise maxPayloadBytes.'
          : subject === 'Progress'
            ? 'Report a small status (counts, a percentage, a stage name) and keep results elsewhere.'
            : 'Store large results elsewhere and return a reference (a key, a URL).'),
    );
  }
}

export class PayloadNotSerialisableError extends AwaError {
  constructor(kind: string, reason: string, subject: PayloadSubject = 'Args') {
    super(
      'AWA_PAYLOAD_NOT_SERIALISABLE',
      `${subject} for job kind "${kind}" cannot be stored as JSON: ${reason}. Pass plain JSON data.`,
    );
  }
}

/** A claimed job's kind has no handler in this process; it is handed back, not failed. */
export class UnknownKindError extends AwaError {
  readonly kind: string;
  constructor(kind: string, known: readonly string[], handBackMs?: number) {
    super(
      'AWA_UNKNOWN_KIND',
      `No handler is registered for job kind "${kind}" (known: ${known.join(', ') || 'none'}). ` +
        'Register it on a worker that serves this queue.' +
        (handBackMs === undefined
          ? ''
          : ` Jobs of this kind are handed back for ${handBackMs} ms meanwhile.`),
    );
    this.kind = kind;
  }
}

/** PostgreSQL could not be reached, or the connection was lost under a call (terminated by the server, reset):
 * the message says which, and what to do. */
export class ConnectionError extends AwaError {
  constructor(target: string, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(
      'AWA_CONNECTION_FAILED',
      endedUnderCall(cause)
        ? `Lost the connection to PostgreSQL at ${target} during the call: ${reason}. Whether the call took effect is unknown; retry it (a unique key makes a retried enqueue safe). If it keeps happening, check the server's log and the network.`
        : `Cannot connect to PostgreSQL at ${target}: ${reason}. Check DATABASE_URL (host, port, user, password, database) and that the server is running.`,
      { cause },
    );
  }
}

/** A session the server ended (admin_shutdown, crash_shutdown, cannot_connect_now are 57P01–57P03, and only
 * the first two end a session already open), or one pg saw end under a statement or just before it. */
function endedUnderCall(cause: unknown): boolean {
  const e = cause as { code?: unknown; message?: unknown } | null;
  if (e?.code === '57P01' || e?.code === '57P02' || e?.code === 'ECONNRESET') return true;
  return (
    typeof e?.message === 'string' &&
    /Connection terminated unexpectedly|encountered a connection error and is not queryable/.test(e.message)
  );
}

/** PostgreSQL did not answer a statement within queryTimeoutMs (plus a grace): its connection was given up as
 * dead. A worker host carries on with new connections; a client's call fails with this, and what the statement
 * did is unknown (sent, perhaps run and committed, its answer lost). */
export class DatabaseUnresponsiveError extends AwaError {
  constructor(cause: unknown) {
    super(
      'AWA_DATABASE_UNRESPONSIVE',
      'PostgreSQL did not answer at all within queryTimeoutMs (plus a grace of up to 5 s), so that connection was given up as dead; the next statement gets a new one. A worker host carries on by itself (a claim whose answer never came is handed back; results are written again). For a call of yours it is unknown whether the statement took effect: retry it where a duplicate is harmless, or give the job a unique key. Check the network path to the server and the server itself (frozen, failing over, out of connections); raise queryTimeoutMs if its statements are legitimately that slow.',
      { cause },
    );
  }
}

/** PostgreSQL refused a write as read-only (SQLSTATE 25006): the connection reached a server that cannot take
 * writes (a standby), or the session or transaction was made read-only. */
export class DatabaseReadOnlyError extends AwaError {
  constructor(cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(
      'AWA_DATABASE_READ_ONLY',
      `PostgreSQL refused a write as read-only (${reason}). Either the connection reached a server that cannot take writes (a standby: the primary failed over and this address still leads to the old one, or it names a replica), or the session or transaction was made read-only (default_transaction_read_only, SET TRANSACTION READ ONLY). Nothing was written. Connections that meet this are given up and reopened, so a worker host carries on once the address leads to the primary again; point connectionString at the primary (a name or proxy that follows failovers).`,
      { cause },
    );
  }
}

/** The worker host's event loop stood still long enough to hold its heartbeats back: something ran
 * synchronously for that long on the host's thread, most often a handler doing CPU-bound work inline. */
export class EventLoopBlockedError extends AwaError {
  readonly stalledMs: number;
  constructor(stalledMs: number, heartbeatStalenessMs: number, inlineKinds: readonly string[]) {
    super(
      'AWA_EVENT_LOOP_BLOCKED',
      `The worker host's event loop stood still for ${stalledMs} ms: no heartbeat, claim, flush or cancel ran meanwhile, and a host silent for heartbeatStalenessMs (${heartbeatStalenessMs} ms) is taken for dead by the leader, which runs its jobs again elsewhere. Something ran synchronously that long on the host's thread, most likely a handler doing CPU-bound work inline (kinds whose handlers run on this thread: ${inlineKinds.join(', ') || 'none'}). Give such a kind execution: "pool" (it then runs in a worker thread), or break the work up with awaits.`,
    );
    this.stalledMs = stalledMs;
  }
}

export class SchemaNotMigratedError extends AwaError {
  constructor(schema: string, have: number, want: number, detail?: string) {
    super(
      'AWA_SCHEMA_NOT_MIGRATED',
      `Schema "${schema}" is at version ${have}${detail ? ` but ${detail}` : ''}, this build needs ${want}. ` +
        'Run `awa migrate` (or migrate()) first.',
    );
  }
}

export class SchemaTooNewError extends AwaError {
  constructor(schema: string, have: number, want: number) {
    super(
      'AWA_SCHEMA_TOO_NEW',
      `Schema "${schema}" is at version ${have}, newer than this build knows (${want}). Upgrade awa-node.`,
    );
  }
}

/** A database call failed for a reason that is not the caller's input; the cause is attached. */
export class DatabaseError extends AwaError {
  constructor(operation: string, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super('AWA_DATABASE_ERROR', `${operation} failed: ${reason}`, { cause });
  }
}

/** A call that must run inside the caller's open transaction was given a client with none. */
export class TransactionRequiredError extends AwaError {
  constructor(operation: string) {
    super(
      'AWA_TRANSACTION_REQUIRED',
      `${operation}({ client }) needs an open transaction on that client: run BEGIN on it first, or omit client and Awa runs the load in a transaction of its own.`,
    );
  }
}

/** A call on an AwaClient after its close(). */
export class ClientClosedError extends AwaError {
  constructor(operation: string) {
    super(
      'AWA_CLIENT_CLOSED',
      `${operation}() was called on an AwaClient after close(): create a new AwaClient (one per process, closed at shutdown, is the usual shape).`,
    );
  }
}

/** The dashboard's configuration is incomplete or unsafe (no credentials, open on a public address…);
 * `field` names the option (or environment variable) to fix. Thrown once, when the dashboard is built. */
export class DashboardConfigError extends AwaError {
  readonly field: string;
  constructor(field: string, message: string) {
    super('AWA_INVALID_CONFIG', `Invalid dashboard configuration "${field}": ${message}`);
    this.field = field;
  }
}

/** An HTTP request to an Awa API carried an input that is out of range or of the wrong shape; `field` names
 * the parameter. Answered as 400 with this code and field. */
export class InvalidRequestError extends AwaError {
  readonly field: string;
  constructor(field: string, message: string) {
    super('AWA_INVALID_REQUEST', `Invalid request "${field}": ${message}`);
    this.field = field;
  }
}

/** A queue operation named a queue Awa has never seen: no job, lane, worker setting, pause or shard setting, DLQ
 * entry or history names it. Refused so a typo does not leave a ghost queue behind; `create` (`--create`) sets
 * up a queue before its first job on purpose. */
export class UnknownQueueError extends AwaError {
  readonly queue: string;
  constructor(queue: string) {
    super(
      'AWA_UNKNOWN_QUEUE',
      `No queue "${queue}": no job, worker, setting or history names it. Check the name (\`awa queue list\`); ` +
        'to set up a queue before its first job (pause it, shard it), pass --create (in the API: { create: true }).',
    );
    this.queue = queue;
  }
}

/** removeQueue() refused: the queue still holds jobs (`holds`, counted by state), DLQ entries, a live worker
 * host serves it (`servedBy`), or a producer or lane set-up was using it at that moment (`busy`). Nothing was
 * removed. */
export class QueueInUseError extends AwaError {
  readonly queue: string;
  readonly holds: Readonly<Record<string, number>>;
  readonly servedBy: readonly string[];
  readonly busy: boolean;
  constructor(
    queue: string,
    detail: { holds: Record<string, number>; servedBy: readonly string[]; busy: boolean },
  ) {
    const jobs = Object.entries(detail.holds)
      .filter(([what, n]) => n > 0 && what !== 'dlq')
      .map(([what, n]) => `${n} ${what}`);
    const dlq = detail.holds.dlq ?? 0;
    const why = [
      ...(jobs.length > 0 ? [`it still holds jobs (${jobs.join(', ')})`] : []),
      ...(dlq > 0 ? [`it has ${dlq} DLQ ${dlq === 1 ? 'entry' : 'entries'}`] : []),
      ...(detail.servedBy.length > 0 ? [`live worker hosts serve it (${detail.servedBy.join(', ')})`] : []),
      ...(detail.busy ? ['a producer or worker was setting up or enqueueing into it at that moment'] : []),
    ];
    super(
      'AWA_QUEUE_IN_USE',
      `Queue "${queue}" was not removed: ${why.join('; ')}. Only a queue with no live jobs, no DLQ entries and ` +
        'no live worker serving it can be removed: let its jobs finish (or cancel them, purge its DLQ), stop ' +
        'the workers that serve it, then try again.',
    );
    this.queue = queue;
    this.holds = detail.holds;
    this.servedBy = detail.servedBy;
    this.busy = detail.busy;
  }
}

/** The newest error record of a job that ended without completing, as result() reports it. */
export interface JobLastError {
  attempt: number;
  at: string;
  error: string;
  name?: string;
}

/** result(): no job has this id, or its history passed retention (completedRetentionMs, failedRetentionMs…). */
export class JobNotFoundError extends AwaError {
  constructor(readonly jobId: string) {
    super(
      'AWA_JOB_NOT_FOUND',
      `No job ${jobId}: it never existed, or its history passed retention. Check the id; to read results later, ` +
        'keep completed history longer (completedRetentionMs, queues.<name>.resultRetentionMs).',
    );
  }
}

/** result(): the job ended without a result: it failed, went to the dead-letter queue, or was cancelled.
 * `state` says which; `lastError` is its newest error record (what the handler threw, the cancel reason). */
export class JobNotCompletedError extends AwaError {
  constructor(
    readonly jobId: string,
    readonly state: 'failed' | 'dlq' | 'cancelled',
    readonly lastError: JobLastError | null,
  ) {
    const how =
      state === 'dlq' ? 'went to the dead-letter queue' : state === 'failed' ? 'failed' : 'was cancelled';
    super(
      'AWA_JOB_NOT_COMPLETED',
      `Job ${jobId} ${how}, so it has no result` +
        (lastError ? `: ${lastError.name ? `${lastError.name}: ` : ''}${lastError.error}` : '') +
        ". Its history (`awa job show`) has every attempt's error.",
    );
  }
}

/** result(): the job had not ended within `timeoutMs`; it may still. `state` is the last state seen. */
export class ResultTimeoutError extends AwaError {
  constructor(
    readonly jobId: string,
    readonly timeoutMs: number,
    readonly state: string,
  ) {
    super(
      'AWA_RESULT_TIMEOUT',
      `Job ${jobId} had not ended within ${timeoutMs} ms (it was ${state}). It may still complete: wait again, ` +
        'or look at it (`awa job show`).',
    );
  }
}
