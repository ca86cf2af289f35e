import type pg from 'pg';
import { InvalidOptionError } from '../model/errors.js';
import type { ChildJobInput } from '../model/job.js';
import { toJobRow, type JobRow } from '../model/enqueue-options.js';
import type { DependencyOutcome } from '../model/flow.js';
import { kindOf } from '../model/job-kind.js';
import { WaitForChildren } from '../model/outcomes.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodeResult } from '../model/payload.js';
import { checkStepName, MAX_STEPS_PER_JOB } from '../model/steps.js';
import { validateName } from '../model/validation.js';
import type { AttemptRef, SpawnedChildren } from '../storage/index.js';
import type { Attempt } from './attempts.js';
import { attemptClosed } from './job-steps.js';

// What a handler reaches beyond its own attempt (docs/flows.md): its own transaction, in which its job completes
// (ctx.transaction); the jobs it runs after (ctx.dependencies); and children it spawns and waits for without
// holding a permit (ctx.spawn, ctx.waitForChildren).

export interface FlowDeps {
  /** Where ctx.transaction() takes its connection. */
  pool: pg.Pool;
  /** Completes the attempt on `tx` (inside its open transaction), fenced; false when the fence refused it. */
  completeOn(tx: pg.ClientBase, attempt: Attempt, resultJson: string | undefined): Promise<boolean>;
  /** The attempt completed with the transaction that just committed: its permit back, nothing queued. */
  completedInTransaction(attempt: Attempt): void;
  dependenciesOf(jobId: string): Promise<DependencyOutcome[]>;
  /** Creates the children's lanes, outside any transaction of the caller's. */
  prepareLanes(rows: readonly JobRow[]): Promise<void>;
  spawnChildren(
    a: AttemptRef,
    spawn: { step: string; maxSteps: number; names: readonly string[]; rows: readonly JobRow[] },
  ): Promise<SpawnedChildren>;
  /** Ends the attempt now as blocked until its children have ended: no attempt spent, its permit given back. */
  block(attempt: Attempt): void;
}

/** Runs `fn` in a transaction that also completes the attempt (see JobContext.transaction). */
export async function inTransaction<T>(
  attempt: Attempt,
  deps: FlowDeps,
  fn: (tx: pg.ClientBase) => Promise<T>,
): Promise<T> {
  if (typeof fn !== 'function') throw new InvalidOptionError('fn', 'ctx.transaction() needs a function');
  if (attempt.settled || attempt.inTransaction) throw attemptClosed(attempt);
  attempt.inTransaction = true;
  const tx = await deps.pool.connect();
  let open = false;
  let broken = false;
  try {
    await tx.query('begin');
    open = true;
    const value = await fn(tx);
    // Encoded before the completion is written: a result that cannot be stored fails the attempt, and rolls back
    // what fn wrote with it.
    const resultJson =
      value === undefined || value === null ? undefined : encodeResult(attempt.job.kind, value);
    if (attempt.settled || !(await deps.completeOn(tx, attempt, resultJson))) throw attemptClosed(attempt);
    await tx.query('commit');
    open = false;
    deps.completedInTransaction(attempt);
    return value;
  } catch (err) {
    if (open) await tx.query('rollback').catch(() => (broken = true));
    throw err;
  } finally {
    // A connection whose rollback failed may still be in the transaction: it goes, rather than back to the pool.
    tx.release(broken || undefined);
  }
}

/** Enqueues the children once per job under `name` (see JobContext.spawn); their ids in order. */
export async function spawnChildren(
  attempt: Attempt,
  ref: AttemptRef,
  deps: FlowDeps,
  name: string,
  jobs: readonly ChildJobInput[],
): Promise<string[]> {
  const step = `awa:spawn:${checkStepName(name)}`;
  if (!Array.isArray(jobs) || jobs.length === 0 || jobs.length > 10_000)
    throw new InvalidOptionError(
      'jobs',
      'must be an array of 1 to 10,000 child jobs { kind, args, options?, name? }',
    );
  const names = jobs.map((j, i) =>
    j?.name === undefined ? String(i) : validateName(`jobs[${i}].name`, j.name),
  );
  if (new Set(names).size !== names.length)
    throw new InvalidOptionError('jobs[].name', 'names two children alike');
  const rows = await Promise.all(
    jobs.map((j, i) => {
      if ((j?.options as { unique?: unknown } | undefined)?.unique !== undefined)
        throw new InvalidOptionError(`jobs[${i}].options.unique`, 'a child job cannot be unique');
      return toJobRow(kindOf(j.kind), j.args, j.options, DEFAULT_MAX_PAYLOAD_BYTES);
    }),
  );
  if (attempt.settled) throw attemptClosed(attempt);
  await deps.prepareLanes(rows);
  const spawned = await deps.spawnChildren(ref, { step, maxSteps: MAX_STEPS_PER_JOB, names, rows });
  if (spawned.status === 'closed' || spawned.status === 'limit') throw attemptClosed(attempt);
  return spawned.ids;
}

/** How the children ended once all have; else blocks the attempt (see JobContext.waitForChildren). */
export async function waitForChildren(attempt: Attempt, deps: FlowDeps): Promise<DependencyOutcome[]> {
  if (attempt.settled) throw attemptClosed(attempt);
  const children = (await deps.dependenciesOf(attempt.job.id)).filter((d) => d.spawned);
  const open = children.filter((d) => d.outcome === null).length;
  if (open === 0) return children;
  deps.block(attempt);
  // The attempt has ended; this unwinds the handler (whatever it does next is ignored).
  throw new WaitForChildren(open);
}
