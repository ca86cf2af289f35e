import { InvalidRequestError } from '../../model/errors.js';
import { JOB_STATES, type JobState } from '../../model/job.js';
import { readLimited } from '../../model/limited-body.js';

// Every value a dashboard request carries is checked here before it reaches the client; a bad one is an
// InvalidRequestError naming the parameter (answered 400). Nothing is coerced silently.

const MAX_NAME_CHARS = 200;
const MAX_JOB_ID = 9223372036854775807n;
export const MAX_PAGE = 200;
export const MAX_IDS = 500;
export const MAX_BODY_BYTES = 64 * 1024;

/** A job id: decimal digits within bigint range. */
export function jobId(field: string, raw: unknown): string {
  if (typeof raw !== 'string' || !/^[1-9]\d{0,18}$/.test(raw) || BigInt(raw) > MAX_JOB_ID) {
    throw new InvalidRequestError(field, 'must be a job id (a positive integer)');
  }
  return raw;
}

/** A queue or kind name as the engine accepts them: 1–200 characters, no control characters. */
export function name(field: string, raw: unknown): string {
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > MAX_NAME_CHARS) {
    throw new InvalidRequestError(field, `must be a name of 1 to ${MAX_NAME_CHARS} characters`);
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(raw) || !raw.isWellFormed()) {
    throw new InvalidRequestError(field, 'must not contain control characters');
  }
  return raw;
}

export function state(field: string, raw: unknown): JobState {
  if (typeof raw !== 'string' || !(JOB_STATES as readonly string[]).includes(raw)) {
    throw new InvalidRequestError(field, `must be one of ${JOB_STATES.join(', ')}`);
  }
  return raw as JobState;
}

/** An ISO 8601 time with a date (e.g. 2026-01-31T12:00:00Z). */
export function time(field: string, raw: unknown): Date {
  const date =
    typeof raw === 'string' && /^\d{4}-\d{2}-\d{2}([T ][\d:.]+)?(Z|[+-]\d{2}:?\d{2})?$/.test(raw)
      ? new Date(raw)
      : null;
  if (!date || Number.isNaN(date.getTime())) {
    throw new InvalidRequestError(field, 'must be an ISO 8601 time, e.g. 2026-01-31T12:00:00Z');
  }
  return date;
}

export function int(field: string, raw: unknown, min: number, max: number): number {
  const n = typeof raw === 'string' && /^\d{1,12}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new InvalidRequestError(field, `must be an integer from ${min} to ${max}`);
  }
  return n;
}

/** A yes/no parameter: 1 or 0. */
export function flag(field: string, raw: string): boolean {
  if (raw !== '1' && raw !== '0') throw new InvalidRequestError(field, 'must be 1 or 0');
  return raw === '1';
}

/** Rejects query parameters the endpoint does not know, so a typo is an error rather than a silent no-op. */
export function knownParams(query: Record<string, string>, known: readonly string[]): void {
  for (const key of Object.keys(query)) {
    if (!known.includes(key))
      throw new InvalidRequestError(key, `is not a parameter here (known: ${known.join(', ') || 'none'})`);
  }
}

export interface JobSearch {
  state: JobState;
  queue?: string;
  kind?: string;
  /** Keyset cursor for states listed by id. */
  beforeId?: string;
  /** Keyset cursor for completed jobs (listed by completion time). */
  before?: Date;
  /** Time range on each job's state time. */
  from?: Date;
  to?: Date;
  limit: number;
}

export const JOB_SEARCH_PARAMS = [
  'state',
  'queue',
  'kind',
  'beforeId',
  'before',
  'from',
  'to',
  'limit',
] as const;

export function jobSearch(query: Record<string, string>): JobSearch {
  knownParams(query, JOB_SEARCH_PARAMS);
  const search: JobSearch = {
    state: state('state', query.state ?? 'available'),
    limit: query.limit === undefined ? 50 : int('limit', query.limit, 1, MAX_PAGE),
  };
  if (query.queue) search.queue = name('queue', query.queue);
  if (query.kind) search.kind = name('kind', query.kind);
  if (query.beforeId) search.beforeId = jobId('beforeId', query.beforeId);
  if (query.before) search.before = time('before', query.before);
  if (query.from) search.from = time('from', query.from);
  if (query.to) search.to = time('to', query.to);
  if (search.from && search.to && search.from > search.to) {
    throw new InvalidRequestError('from', 'must not be after "to"');
  }
  return search;
}

/** Reads a JSON object body of at most MAX_BODY_BYTES; the content type must say JSON (a form cannot post
 * one cross-site without a CORS preflight). */
export async function jsonBody(request: Request): Promise<Record<string, unknown>> {
  const type = request.headers.get('content-type') ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new InvalidRequestError('content-type', 'must be application/json');
  }
  const bytes = await readLimited(request.body, MAX_BODY_BYTES, 'release');
  if (!bytes) throw new InvalidRequestError('body', `must be at most ${MAX_BODY_BYTES} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    throw new InvalidRequestError('body', 'must be JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidRequestError('body', 'must be a JSON object');
  }
  return value as Record<string, unknown>;
}

/** An action body with no fields (`{}`): actions that take nothing still must come as JSON. */
export function emptyBody(body: Record<string, unknown>): void {
  const [key] = Object.keys(body);
  if (key !== undefined) throw new InvalidRequestError(key, 'is not accepted by this action');
}

/** `{ ids: ["1", "2"] }`: 1 to MAX_IDS distinct job ids. */
export function idList(body: Record<string, unknown>): string[] {
  for (const key of Object.keys(body)) {
    if (key !== 'ids') throw new InvalidRequestError(key, 'is not accepted (send { ids: [...] })');
  }
  const ids = body.ids;
  if (!Array.isArray(ids) || ids.length === 0 || ids.length > MAX_IDS) {
    throw new InvalidRequestError('ids', `must be an array of 1 to ${MAX_IDS} job ids`);
  }
  return [...new Set(ids.map((id, i) => jobId(`ids[${i}]`, id)))];
}

/** `{ override: {...} }` sets an override of a queue's limits, `{ override: null }` clears it. Only the shape is
 * checked here; the client checks the limits themselves and names the field it refuses. */
export function limitsOverride(body: Record<string, unknown>): Record<string, unknown> | null {
  for (const key of Object.keys(body)) {
    if (key !== 'override')
      throw new InvalidRequestError(key, 'is not accepted (send { override: {...} } or { override: null })');
  }
  const override = body.override;
  if (override === null) return null;
  if (typeof override !== 'object' || override === undefined || Array.isArray(override))
    throw new InvalidRequestError('override', 'must be an object of limits, or null to clear the override');
  return override as Record<string, unknown>;
}
