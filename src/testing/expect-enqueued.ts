import type { JobKind } from '../model/job-kind.js';
import { validateName } from '../model/validation.js';
import { wrapDatabaseError, type JobRecord } from '../storage/index.js';
import { enqueuedJobs, enqueuedKinds } from '../storage/testing.js';
import { closestDiff } from './enqueued-diff.js';
import { differences, validateMatch, type EnqueuedMatch } from './enqueued-match.js';
import { noMatch, noneOfKind, unexpected, type Candidate } from './enqueued-report.js';
import { EnqueuedAssertionError } from './errors.js';
import { resolveTarget, type EnqueuedTarget, type ResolvedTarget } from './target.js';

// Assertions about what was enqueued. They read through the target's connection, so on a connection inside an
// open transaction they see the jobs that transaction enqueued and nobody else has seen yet: what a test of
// "this function enqueues its job in the caller's transaction" needs. They throw EnqueuedAssertionError, a
// plain Error subclass, so they work under any runner (vitest, node:test, mocha).

type KindRef<Args> = JobKind<Args> | string;

const kindName = (kind: KindRef<unknown>): string =>
  typeof kind === 'string' ? validateName('kind', kind) : validateName('kind', kind?.kind);

async function candidates(t: ResolvedTarget, kind: string, match: EnqueuedMatch): Promise<Candidate[]> {
  const found = await read('the jobs enqueued', t, () => enqueuedJobs(t.db, t.schema, kind));
  return found.map((job) => ({ job, differences: differences(match, job) }));
}

async function read<T>(what: string, t: ResolvedTarget, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    // undefined_table / invalid_schema_name: nothing of Awa's is installed where the target points.
    const code = (err as { code?: unknown }).code;
    const missing = code === '42P01' || code === '3F000' || code === '42883';
    throw wrapDatabaseError(`Reading ${what} in ${t.where}${missing ? ` (${t.hint})` : ''}`, err, t.where);
  }
}

/**
 * Asserts that a job of `kind` matching `match` was enqueued where `target` reads (see EnqueuedTarget), and
 * returns the matching jobs (oldest first), as getJob() reports them. With `match.count`, exactly that many must
 * match. Throws EnqueuedAssertionError listing what was enqueued instead, field by field.
 */
export async function expectEnqueued<Args>(
  target: EnqueuedTarget,
  kind: KindRef<Args>,
  match?: EnqueuedMatch<Args>,
): Promise<JobRecord[]> {
  const name = kindName(kind);
  const m = validateMatch(match, true);
  const t = resolveTarget(target);
  const all = await candidates(t, name, m);
  const matching = all.filter((c) => c.differences.length === 0);
  if (m.count === undefined ? matching.length > 0 : matching.length === m.count)
    return matching.map((c) => c.job);
  if (all.length === 0) {
    const kinds = await read('the kinds enqueued', t, () => enqueuedKinds(t.db, t.schema));
    throw new EnqueuedAssertionError('expectEnqueued', noneOfKind(name, m, t.where, kinds));
  }
  throw new EnqueuedAssertionError('expectEnqueued', noMatch(name, m, t.where, all), closestDiff(m, all));
}

/** Asserts that no job of `kind` matching `match` (any job of it, without one) was enqueued where `target`
 * reads. Throws EnqueuedAssertionError listing those that were. */
export async function expectNotEnqueued<Args>(
  target: EnqueuedTarget,
  kind: KindRef<Args>,
  match?: Omit<EnqueuedMatch<Args>, 'count'>,
): Promise<void> {
  const name = kindName(kind);
  const m = validateMatch(match, false);
  const t = resolveTarget(target);
  const matching = (await candidates(t, name, m)).filter((c) => c.differences.length === 0);
  if (matching.length > 0)
    throw new EnqueuedAssertionError('expectNotEnqueued', unexpected(name, m, t.where, matching));
}
