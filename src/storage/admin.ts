import type { Actor } from '../model/audit.js';
import type { AttemptError, JobState } from '../model/job.js';
import { isJobId } from '../model/validation.js';
import { audited, type Audited } from './audit.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Operator reads (see sql/functions/reads/admin.sql): counts from cursors and receipts, one job's state derived in
// one SQL function and one snapshot.

export interface QueueCounts {
  queue: string;
  /** Paused fleet-wide: no host claims its jobs until it is resumed. */
  paused: boolean;
  available: number;
  running: number;
  /** Parked until an external callback (waiting_external). */
  waiting: number;
  scheduled: number;
  retryable: number;
  completed: number;
  failed: number;
  cancelled: number;
  /** Entries held in the dead-letter queue. */
  dlq: number;
  /** Jobs of a flow waiting for their dependencies (docs/flows.md). */
  blocked: number;
}

type CountsRow = Record<Exclude<keyof QueueCounts, 'paused'>, string> & { paused: boolean };

/** The counts columns queue_counts() and queue_health() share (bigints arrive as text). */
function countsOf(r: CountsRow): QueueCounts {
  return {
    queue: r.queue,
    paused: r.paused,
    available: Number(r.available),
    running: Number(r.running),
    waiting: Number(r.waiting),
    scheduled: Number(r.scheduled),
    retryable: Number(r.retryable),
    completed: Number(r.completed),
    failed: Number(r.failed),
    cancelled: Number(r.cancelled),
    dlq: Number(r.dlq),
    blocked: Number(r.blocked),
  };
}

export async function queueCounts(db: Queryable, schema: Schema): Promise<QueueCounts[]> {
  const { rows } = await db.query<CountsRow>(`select * from ${schema.ident}.queue_counts()`);
  return rows.map(countsOf);
}

export interface JobClaim {
  at: Date;
  /** The runtime instance that claimed it (as the runtimes list names it). */
  instanceId: string;
  /** That instance's host and process, while its registration is kept; null after. */
  hostname: string | null;
  pid: number | null;
}

export interface JobRecord {
  id: string;
  state: JobState;
  /** Null only for a completed job whose body is gone and of which compact history remains. */
  kind: string | null;
  queue: string;
  priority: number;
  args: unknown;
  /** Attempts started so far. */
  attempt: number;
  maxAttempts: number | null;
  runLease: number;
  runAt: Date | null;
  /** When it reached its terminal state (failed, cancelled, DLQ, or completed once its body is pruned). */
  finishedAt: Date | null;
  /** The attempt's claim, from its receipt: only while the ring holds one (running, or completed in the ring).
   * Null otherwise: the terminal tables and the backlog do not keep who ran an attempt. */
  claim: JobClaim | null;
  meta: {
    metadata?: Record<string, unknown>;
    tags?: string[];
    errors?: AttemptError[];
    /** The trace context the job was enqueued in (see docs/telemetry.md). */
    trace?: Record<string, string>;
    /** A unique job's key and the states it is held in (see docs/unique-jobs.md). */
    unique?: { key: string; states: JobState[] };
    /** The payload of the callback that completed a parked job (`completeExternal`, see docs/callbacks.md). */
    result?: unknown;
    /** The payload of the callback that resumed a parked job into its handler, and when it came. */
    callback?: { payload: unknown; at: string };
  } | null;
  /** A completed job's stored result: what its handler returned (or the payload of the callback that completed
   * it), kept for its queue's result retention (resultRetentionMs). Null when there is none: the job is not
   * completed, returned nothing (or null), or its result passed retention. See docs/flows.md, "Results". */
  result: unknown;
}

/** Where job `id` stands now, or null if it never existed or its history passed retention. */
export async function findJob(db: Queryable, schema: Schema, id: string): Promise<JobRecord | null> {
  if (!isJobId(id)) return null;
  // The stored result of a completed job (job_results) beside its state, in the same snapshot.
  const read = () =>
    db.query(
      `select s.*, case when s.state = 'completed'
                        then (select r.result from ${schema.ident}.job_results r where r.job_id = $1::bigint) end
                     as result
         from ${schema.ident}.job_state($1::bigint) s`,
      [id],
    );
  let r = (await read()).rows[0];
  // TRUNCATE is not MVCC-safe: a read whose snapshot began just before a prune committed sees the pruned
  // slot's partitions empty but not yet the compact history that prune wrote, so a completed job can read as
  // missing for that one snapshot. A second read (a new snapshot) sees the history.
  if (!r) r = (await read()).rows[0];
  if (!r) return null;
  return {
    id,
    state: r.state,
    kind: r.kind,
    queue: r.queue,
    priority: r.priority,
    args: r.args,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    runLease: Number(r.run_lease),
    runAt: r.run_at,
    finishedAt: r.finished_at,
    claim: r.claimed_at
      ? { at: r.claimed_at, instanceId: r.claimed_by, hostname: r.claimed_host, pid: r.claimed_pid }
      : null,
    meta: r.meta,
    result: r.result ?? null,
  };
}

export interface QueueHealth extends QueueCounts {
  /** Completed (and failed, incl. DLQ) within the window asked for. */
  completedRecent: number;
  failedRecent: number;
  /** When the oldest job still available became runnable, or null when none is. */
  oldestAvailableAt: Date | null;
  /** The queue has unclaimed rows or open receipts in the ring's oldest slot (it may be what holds prune). */
  inOldestSlot: boolean;
  /** Lanes per priority that producers spread over (1 = strict FIFO per priority; see setEnqueueShards). */
  enqueueShards: number;
}

export async function queueHealth(
  db: Queryable,
  schema: Schema,
  windowSeconds: number,
): Promise<QueueHealth[]> {
  const { rows } = await db.query(`select * from ${schema.ident}.queue_health($1)`, [
    Math.round(windowSeconds),
  ]);
  return rows.map((r) => ({
    ...countsOf(r),
    completedRecent: Number(r.completed_recent),
    failedRecent: Number(r.failed_recent),
    oldestAvailableAt: r.oldest_available_at,
    inOldestSlot: r.in_oldest_slot,
    enqueueShards: Number(r.enqueue_shards),
  }));
}

export interface JobListFilter {
  state: JobState;
  queue?: string;
  kind?: string;
  /** Keyset paging: ids below this (all states but completed and available). */
  beforeId?: string;
  /** Only jobs whose state's time (`at`) is before this; also the keyset paging key of completed. */
  beforeAt?: Date;
  /** Only jobs whose state's time (`at`) is at or after this. */
  afterAt?: Date;
  limit: number;
}

export interface JobSummary {
  id: string;
  state: JobState;
  /** Null for completed jobs known only from compact history. */
  kind: string | null;
  queue: string;
  priority: number;
  attempt: number;
  maxAttempts: number | null;
  /** The state's own time: run time (scheduled, retryable), ready (available), claimed (running), parked
   * (waiting_external), finished (completed, failed, cancelled), dead-lettered (dlq). */
  at: Date;
}

export async function listJobs(db: Queryable, schema: Schema, f: JobListFilter): Promise<JobSummary[]> {
  const { rows } = await db.query(
    `select * from ${schema.ident}.list_jobs($1, $2, $3, $4::bigint, $5, $6, $7)`,
    [
      f.state,
      f.queue ?? null,
      f.kind ?? null,
      f.beforeId ?? null,
      f.beforeAt ?? null,
      f.afterAt ?? null,
      f.limit,
    ],
  );
  return rows.map((r) => ({
    id: String(r.job_id),
    state: r.state,
    kind: r.kind,
    queue: r.queue,
    priority: r.priority,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    at: r.at,
  }));
}

/** When the completions kept only in compact history (no kind, no args) closed, for a queue or all: a kind
 * filter on completed jobs cannot find those. Null when there are none. */
export async function compactHistorySpan(
  db: Queryable,
  schema: Schema,
  queue: string | null,
): Promise<{ oldest: Date; newest: Date } | null> {
  const { rows } = await db.query<{ oldest: Date | null; newest: Date | null }>(
    `select oldest, newest from ${schema.ident}.compact_history_span($1)`,
    [queue],
  );
  const r = rows[0];
  return r?.oldest && r.newest ? { oldest: r.oldest, newest: r.newest } : null;
}

/** Runs a failed, cancelled, dead-lettered, scheduled or retryable job again now; the state it was retried
 * from, or null when it is in none of those. */
/** What a retry did: the state the job was retried from, or why it was not retried. */
export type RetryOutcome =
  | { retried: true; from: JobState }
  | { retried: false; reason: 'not_found'; state: null }
  /** Live already (available, running, waiting) or completed: nothing to run again. */
  | { retried: false; reason: 'not_retryable'; state: JobState }
  /** A unique job whose key another job holds now: it stays where it is. */
  | { retried: false; reason: 'unique_held'; state: JobState; heldBy: string | null };

export async function retryJob(
  db: Queryable,
  schema: Schema,
  id: string,
  by: Actor,
): Promise<Audited<RetryOutcome>> {
  const { rows, record } = await audited<{
    retried_from: JobState | null;
    refused: 'not_found' | 'not_retryable' | 'unique_held' | null;
    state: JobState | null;
    held_by: string | null;
  }>(
    db,
    schema,
    { by, action: 'job.retry', target: id },
    {
      ctes: `act as (select t.retried_from, t.refused, t.state, t.held_by::text
                       from ${schema.ident}.retry_job($1::bigint) t)`,
      values: [id],
      detail: `(select jsonb_build_object('retriedFrom', a.retried_from, 'refused', a.refused) from act a)`,
    },
  );
  return { value: retryOutcome(rows[0]!), record };
}

function retryOutcome(r: {
  retried_from: JobState | null;
  refused: 'not_found' | 'not_retryable' | 'unique_held' | null;
  state: JobState | null;
  held_by: string | null;
}): RetryOutcome {
  if (r.retried_from) return { retried: true, from: r.retried_from };
  if (r.refused === 'unique_held')
    return { retried: false, reason: r.refused, state: r.state!, heldBy: r.held_by };
  if (r.refused === 'not_retryable') return { retried: false, reason: r.refused, state: r.state! };
  return { retried: false, reason: 'not_found', state: null };
}

export interface RuntimeInstance {
  instanceId: string;
  hostname: string;
  pid: number;
  version: string | null;
  queues: string[];
  /** Queue → concurrency of this host. */
  concurrency: Record<string, number> | null;
  inFlight: number;
  isLeader: boolean;
  startedAt: Date;
  heartbeatAt: Date;
  stoppedAt: Date | null;
  live: boolean;
}

export async function runtimeList(
  db: Queryable,
  schema: Schema,
  liveSeconds: number,
): Promise<RuntimeInstance[]> {
  const { rows } = await db.query(`select * from ${schema.ident}.runtime_list($1)`, [
    Math.round(liveSeconds),
  ]);
  return rows.map((r) => ({
    instanceId: r.instance_id,
    hostname: r.hostname,
    pid: r.pid,
    version: r.version,
    queues: r.queues,
    concurrency: r.concurrency,
    inFlight: r.in_flight,
    isLeader: r.is_leader,
    startedAt: r.started_at,
    heartbeatAt: r.heartbeat_at,
    stoppedAt: r.stopped_at,
    live: r.live,
  }));
}

export interface Descriptor {
  subject: 'queue' | 'kind';
  name: string;
  descriptor: Record<string, unknown>;
  hash: string;
  reportedAt: Date;
  /** Live hosts that report it. */
  reporters: number;
  /** No live host refreshed it lately. */
  stale: boolean;
  /** Live hosts report different definitions. */
  drift: boolean;
}

export async function listDescriptors(
  db: Queryable,
  schema: Schema,
  liveSeconds: number,
): Promise<Descriptor[]> {
  const { rows } = await db.query(`select * from ${schema.ident}.descriptors($1)`, [Math.round(liveSeconds)]);
  return rows.map((r) => ({
    subject: r.subject,
    name: r.name,
    descriptor: r.descriptor,
    hash: r.hash,
    reportedAt: r.reported_at,
    reporters: r.reporters,
    stale: r.stale,
    drift: r.drift,
  }));
}

export interface StorageFamily {
  /** A ring table family (ready_entries, claim_batches…) or a plain table. */
  family: string;
  partitions: number;
  bytes: number;
  liveTuples: number;
  deadTuples: number;
}

export async function storageStatus(db: Queryable, schema: Schema): Promise<StorageFamily[]> {
  const { rows } = await db.query(`select * from ${schema.ident}.storage_status()`);
  return rows.map((r) => ({
    family: r.family,
    partitions: r.partitions,
    bytes: Number(r.bytes),
    liveTuples: Number(r.live_tuples),
    deadTuples: Number(r.dead_tuples),
  }));
}
