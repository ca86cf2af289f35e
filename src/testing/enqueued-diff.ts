import type { JobRecord } from '../storage/index.js';
import type { EnqueuedMatch } from './enqueued-match.js';
import type { Candidate } from './enqueued-report.js';
import { isPlainObject } from './match.js';

// The `actual` and `expected` a failed expectEnqueued() carries, as node's AssertionError does, so that a runner
// which draws its own diff (vitest) draws one: the job nearest to the match, cut down to the fields and keys the
// match names, beside the match itself.

/** The nearest job (fewest differences) and the match, for a runner's diff. */
export function closestDiff(
  match: EnqueuedMatch,
  all: readonly Candidate[],
): { actual: unknown; expected: unknown } {
  const misses = all.filter((c) => c.differences.length > 0);
  const nearest = (misses.length ? misses : all).reduce((a, b) =>
    b.differences.length < a.differences.length ? b : a,
  );
  const { count: _count, ...expected } = match;
  return { actual: projection(match, nearest.job), expected };
}

/** The part of a job a match names, shaped like the match. */
function projection(match: EnqueuedMatch, job: JobRecord): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (match.args !== undefined) out.args = project(match.args, job.args);
  if (match.queue !== undefined) out.queue = job.queue;
  if (match.priority !== undefined) out.priority = job.priority;
  if (match.scheduled !== undefined) out.scheduled = job.state === 'scheduled' ? (job.runAt ?? true) : false;
  return out;
}

/** `actual` with only the keys `expected` names, at every depth. */
function project(expected: unknown, actual: unknown): unknown {
  if (Array.isArray(expected) && Array.isArray(actual) && expected.length === actual.length)
    return actual.map((a, i) => project(expected[i], a));
  if (!isPlainObject(expected) || !isPlainObject(actual)) return actual;
  return Object.fromEntries(
    Object.keys(expected)
      .filter((k) => k in actual)
      .map((k) => [k, project(expected[k], actual[k])]),
  );
}
