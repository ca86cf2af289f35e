import { InvalidOptionError } from '../model/errors.js';
import { JOB_STATES } from '../model/job.js';
import {
  isJobId,
  rejectUnknownKeys,
  validateDate,
  validateInt,
  validateName,
  validatePlainObject,
} from '../model/validation.js';
import type { DlqTarget, JobListFilter } from '../storage/index.js';

// The filters of the client's operator reads and DLQ actions, validated at the edge: each names the bad field.

interface ByQueueKind {
  queue?: string;
  kind?: string;
  beforeId?: string;
}

/** A filter object of exactly `keys`, whose queue, kind and beforeId (those present) are well formed. */
function queueKindFilter<F extends ByQueueKind>(filter: F, keys: readonly string[]): F {
  validatePlainObject('filter', filter);
  rejectUnknownKeys('filter', filter, keys);
  if (filter.queue !== undefined) validateName('filter.queue', filter.queue);
  if (filter.kind !== undefined) validateName('filter.kind', filter.kind);
  if (filter.beforeId !== undefined && !isJobId(filter.beforeId))
    throw new InvalidOptionError('filter.beforeId', 'must be a job id');
  return filter;
}

const pageLimit = (limit: number | undefined) =>
  limit === undefined ? 50 : validateInt('filter.limit', limit, 1, 1000);

/** listJobs(): a state, its optional filters and paging keys, and the page size (default 50). */
export function jobListFilter(filter: Omit<JobListFilter, 'limit'> & { limit?: number }): JobListFilter {
  queueKindFilter(filter, ['state', 'queue', 'kind', 'beforeId', 'beforeAt', 'afterAt', 'limit']);
  if (!JOB_STATES.includes(filter.state)) {
    throw new InvalidOptionError(
      'filter.state',
      `must be one of ${JOB_STATES.join(', ')}, got ${String(filter.state)}`,
    );
  }
  if (filter.beforeAt !== undefined) validateDate('filter.beforeAt', filter.beforeAt);
  if (filter.afterAt !== undefined) validateDate('filter.afterAt', filter.afterAt);
  return { ...filter, limit: pageLimit(filter.limit) };
}

/** dlqPage(): a queue or kind (or all), a paging key, and the page size (default 50). */
export function dlqPageFilter(filter: ByQueueKind & { limit?: number }): ByQueueKind & { limit: number } {
  queueKindFilter(filter, ['queue', 'kind', 'beforeId', 'limit']);
  return { ...filter, limit: pageLimit(filter.limit) };
}

/** countDlq(): a queue or kind (or all). */
export function dlqCountFilter(filter: { queue?: string; kind?: string }): { queue?: string; kind?: string } {
  return queueKindFilter(filter, ['queue', 'kind']);
}

/** purgeDlq(): these ids, or a queue's (or all) entries dead-lettered before a time. */
export function dlqTarget(target: DlqTarget): DlqTarget {
  validatePlainObject('target', target);
  if ('ids' in target) {
    if (!Array.isArray(target.ids) || !target.ids.every(isJobId))
      throw new InvalidOptionError('target.ids', 'must be an array of job ids');
  } else {
    validateDate('target.before', target.before);
    if (target.queue !== undefined) validateName('target.queue', target.queue);
  }
  return target;
}
