import { createHash } from 'node:crypto';
import { InvalidOptionError } from './errors.js';
import { ENDED_STATES, type JobState } from './job-state.js';
import { describe, rejectUnknownKeys, validateInt, validatePlainObject } from './validation.js';

// Unique jobs: which key a job claims, and in which states of the job holding it that key blocks a duplicate.
// A key is scoped to the kind: one given by the producer, or one derived from queue + args (stable under
// object key order). With a period, the key is per time bucket of the job's run time (one per hour, say).

export interface UniqueOptions {
  /** The key; default derived from the job's queue and args. */
  key?: string;
  /** States of the holder that block a duplicate. Always includes every state before an end (scheduled,
   * available, running, retryable, waiting_external); add ended ones (completed, failed, cancelled, dlq)
   * to keep blocking after the holder ended. */
  states?: JobState[];
  /** One job per bucket of this many milliseconds of run time (e.g. 3_600_000: one per hour). */
  periodMs?: number;
}

/** The states in which every holder blocks: a job not yet ended. */
export const UNIQUE_BASE_STATES: readonly JobState[] = [
  'scheduled',
  'available',
  'running',
  'retryable',
  'waiting_external',
];
const UNIQUE_KEYS = ['key', 'states', 'periodMs'] as const;

export interface ResolvedUnique {
  key: string | undefined;
  states: JobState[];
  periodMs: number | undefined;
}

/** Validates `unique` (true, or UniqueOptions) as given to defineJob or enqueue. */
export function resolveUnique(field: string, value: unknown): ResolvedUnique | undefined {
  if (value === undefined || value === false) return undefined;
  if (value === true) return { key: undefined, states: [...UNIQUE_BASE_STATES], periodMs: undefined };
  const o = validatePlainObject(field, value);
  rejectUnknownKeys(field, o, UNIQUE_KEYS);
  if (o.key !== undefined && (typeof o.key !== 'string' || o.key.length === 0 || o.key.length > 1000)) {
    throw new InvalidOptionError(
      `${field}.key`,
      `must be a string of 1 to 1000 characters, got ${describe(o.key)}`,
    );
  }
  const states = new Set<JobState>(UNIQUE_BASE_STATES);
  if (o.states !== undefined) {
    if (!Array.isArray(o.states))
      throw new InvalidOptionError(`${field}.states`, 'must be an array of job states');
    for (const s of o.states) {
      if (!UNIQUE_BASE_STATES.includes(s as JobState) && !ENDED_STATES.includes(s as JobState)) {
        throw new InvalidOptionError(
          `${field}.states`,
          `has ${describe(s)}; allowed: ${[...UNIQUE_BASE_STATES, ...ENDED_STATES].join(', ')}`,
        );
      }
      states.add(s as JobState);
    }
  }
  const periodMs =
    o.periodMs === undefined
      ? undefined
      : validateInt(`${field}.periodMs`, o.periodMs, 1_000, 366 * 86_400_000);
  return { key: o.key as string | undefined, states: [...states], periodMs };
}

/** The stored key: a hash of the kind, the given key or queue + canonical args, and the period bucket. */
export function uniqueKey(
  u: ResolvedUnique,
  kind: string,
  queue: string,
  argsJson: string,
  runAtMs: number,
): string {
  const scope =
    u.key !== undefined
      ? `key\u0000${u.key}`
      : `args\u0000${queue}\u0000${canonicalJson(JSON.parse(argsJson))}`;
  const bucket =
    u.periodMs === undefined
      ? ''
      : `\u0000period\u0000${u.periodMs}\u0000${Math.floor(runAtMs / u.periodMs)}`;
  return createHash('sha256').update(`${kind}\u0000${scope}${bucket}`).digest('hex');
}

/** JSON with object keys sorted at every level, so {a,b} and {b,a} give one key. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}
