import { InvalidOptionError } from '../model/errors.js';
import {
  rejectUnknownKeys,
  validateInt,
  validateName,
  validatePlainObject,
  validatePriority,
  type Priority,
} from '../model/validation.js';
import type { JobRecord } from '../storage/index.js';
import { mismatches, type Mismatch } from './match.js';

// What expectEnqueued() and expectNotEnqueued() look for in a job, and how one job measures up to it.

/** A value tested rather than compared: a predicate, or a matcher with `asymmetricMatch` (`expect.any(String)`). */
export type Matcher = ((value: unknown) => boolean) | { asymmetricMatch(value: unknown): boolean };

/** What a partial match of args may hold: any subset of the keys, at any depth, or a matcher in any place. */
export type PartialArgs<T> = T extends readonly (infer E)[]
  ? readonly PartialArgs<E>[] | Matcher
  : T extends object
    ? { [K in keyof T]?: PartialArgs<T[K]> } | Matcher
    : T | Matcher;

export interface EnqueuedMatch<Args = unknown> {
  /** Matches args that have at least these keys, each matching (deeply; arrays element by element). */
  args?: PartialArgs<Args>;
  queue?: string;
  priority?: Priority;
  /** true: the job waits for its run time (scheduled); false: it does not; a Date: it is scheduled for exactly
   * then; a function: it is scheduled, and the function accepts its run time. */
  scheduled?: boolean | Date | ((runAt: Date) => boolean);
  /** expectEnqueued() only: exactly this many jobs match. Default: at least one. */
  count?: number;
}

const KEYS = ['args', 'queue', 'priority', 'scheduled', 'count'] as const;

/** Checks a match's shape (typos and wrong types fail here, naming the field, not as a confusing miss). */
export function validateMatch(match: unknown, allowCount: boolean): EnqueuedMatch {
  if (match === undefined) return {};
  const m = validatePlainObject('match', match) as EnqueuedMatch;
  rejectUnknownKeys('match', m, allowCount ? KEYS : KEYS.filter((k) => k !== 'count'));
  if (m.queue !== undefined) validateName('match.queue', m.queue);
  if (m.priority !== undefined) validatePriority('match.priority', m.priority);
  if (m.count !== undefined) validateInt('match.count', m.count, 0, 1_000_000);
  const s = m.scheduled;
  if (s !== undefined && typeof s !== 'boolean' && typeof s !== 'function' && !(s instanceof Date))
    throw new InvalidOptionError(
      'match.scheduled',
      'must be true, false, a Date or a function of the run time',
    );
  return m;
}

/** How `job` differs from `match` (empty: it matches), with paths named from the job: `queue`, `args.to`. */
export function differences(match: EnqueuedMatch, job: JobRecord): Mismatch[] {
  const found: Mismatch[] = [];
  const field = (path: string, expected: unknown, actual: unknown) => {
    if (expected !== undefined) found.push(...mismatches(expected, actual, path));
  };
  field('queue', match.queue, job.queue);
  field('priority', match.priority, job.priority);
  if (match.scheduled !== undefined) found.push(...scheduleDifferences(match.scheduled, job));
  if (match.args !== undefined) found.push(...mismatches(match.args, job.args, 'args'));
  return found;
}

function scheduleDifferences(expected: NonNullable<EnqueuedMatch['scheduled']>, job: JobRecord): Mismatch[] {
  const scheduled = job.state === 'scheduled' && job.runAt !== null;
  const actual = scheduled ? job.runAt : `not scheduled (${job.state})`;
  const differ = [{ path: 'scheduled', expected, actual, missing: false }];
  if (typeof expected === 'boolean') return expected === scheduled ? [] : differ;
  if (!scheduled) return differ;
  if (expected instanceof Date) return expected.getTime() === job.runAt!.getTime() ? [] : differ;
  return expected(job.runAt!) ? [] : differ;
}
