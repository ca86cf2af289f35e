import type pg from 'pg';
import type { Actor, ActorOptions, AuditRecord } from '../model/audit.js';
import { InvalidOptionError } from '../model/errors.js';
import type { Pooler } from '../storage/index.js';

// What an AwaClient is made with, and the option shapes its methods share: validated where they are used (the
// client's constructor, each method), named here once.

export interface ClientOptions {
  connectionString?: string;
  pool?: pg.Pool;
  /** What connectionString (or pool) leads through: 'transaction' for a transaction-mode pooler (PgBouncer
   * `pool_mode = transaction`), so the client keeps nothing on a session: no statement_timeout set on its
   * pool's connections, no named statements, and migrate() on sessionConnectionString. Default 'none'. */
  pooler?: Pooler;
  /** A direct connection to PostgreSQL for migrate(), whose advisory lock needs a session of its own.
   * Required for migrate() when pooler is 'transaction'. */
  sessionConnectionString?: string;
  /** A hot standby (streaming replica) of the same database for the operator's reads: queue health and counts,
   * job pages and getJob(), the DLQ, runtimes, cron, the audit trail. They then lag the primary by the
   * standby's replay delay (readLag() says how much); every write, and the storage and ring reads (table
   * statistics are the primary's own), stay on the primary. A pool of its own, sized and timed like the main
   * one, through the same `pooler`. See docs/deployment.md, "Read replicas". */
  readConnectionString?: string;
  schema?: string;
  /** Pool size when the client creates its pool. Default 10. */
  poolSize?: number;
  /** Largest encoded args accepted. Default 1 MiB. */
  maxPayloadBytes?: number;
  /** Longest a statement on the client's own pool may run; unanswered half as long again later (at most 5 s
   * more), the call fails with DatabaseUnresponsiveError. Default 30 s. Not for a pool you pass, nor migrate(). */
  queryTimeoutMs?: number;
  /** Who this client's operator actions are recorded as when a call names no actor (see docs/operations.md,
   * "Audit trail"). Default: `process`, from `<host name>:<pid>`. */
  actor?: Actor;
  /** Called with each audit record once its action has committed. Default: one line on stderr,
   * `[awa] audit {json}`. */
  onAudit?: (record: AuditRecord) => void;
}

export const CLIENT_OPTION_KEYS = [
  'connectionString',
  'pool',
  'pooler',
  'sessionConnectionString',
  'readConnectionString',
  'schema',
  'poolSize',
  'maxPayloadBytes',
  'queryTimeoutMs',
  'actor',
  'onAudit',
] as const;

/** What enqueueFlow() wrote: the flow's id and each job's id by its name in the flow. */
export interface FlowEnqueueResult {
  flowId: string;
  jobs: Record<string, string>;
}

/** Options of pauseQueue(), resumeQueue() and setEnqueueShards(). */
export interface QueueSettingOptions extends ActorOptions {
  /** Act on a queue nothing names yet (no job, worker, setting or history), which makes it exist: how a deploy
   * pauses or shards a new queue before its first job. Without it such a queue is refused (UnknownQueueError),
   * so a mistyped name leaves no ghost queue behind. */
  create?: boolean;
}

export function createOption(options: QueueSettingOptions | undefined): boolean {
  const create = options?.create;
  if (create !== undefined && typeof create !== 'boolean')
    throw new InvalidOptionError('options.create', 'must be a boolean');
  return create === true;
}
