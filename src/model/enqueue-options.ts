import {
  AwaError,
  InvalidArgsError,
  InvalidOptionError,
  messageOf,
  PayloadNotSerialisableError,
} from './errors.js';
import type { JobKind } from './job-kind.js';
import { encodeArgs } from './payload.js';
import { resolveUnique, uniqueKey, type UniqueOptions } from './unique.js';
import {
  rejectUnknownKeys,
  validateDate,
  validateInt,
  validateMaxAttempts,
  validateName,
  validatePlainObject,
  validatePriority,
  validateTags,
  type Priority,
} from './validation.js';

/** Per-job options at enqueue; each falls back to the kind's default. */
export interface JobOptions {
  queue?: string;
  priority?: Priority;
  /** Run no earlier than this time; a future time makes the job scheduled. */
  runAt?: Date;
  /** Same as runAt = now + delayMs. */
  delayMs?: number;
  maxAttempts?: number;
  metadata?: Record<string, unknown>;
  tags?: string[];
  /** Make this job unique (true, or UniqueOptions), or not (false), whatever its kind says. A duplicate is
   * not inserted: enqueue reports the job that holds the key. */
  unique?: UniqueOptions | boolean;
}

const JOB_OPTION_KEYS = [
  'queue',
  'priority',
  'runAt',
  'delayMs',
  'maxAttempts',
  'metadata',
  'tags',
  'unique',
] as const;

/** A job ready for storage: validated, encoded, defaults applied. */
export interface JobRow {
  kind: string;
  queue: string;
  priority: Priority;
  argsJson: string;
  maxAttempts: number;
  /** Null when the job is runnable now. */
  runAt: Date | null;
  metaJson: string | null;
  /** Carries a unique key (in its meta): it must go through enqueue(), which takes the key. */
  unique: boolean;
}

export async function toJobRow(
  kind: JobKind<unknown>,
  args: unknown,
  options: JobOptions | undefined,
  maxPayloadBytes: number,
  now: number = Date.now(),
): Promise<JobRow> {
  let value: unknown;
  try {
    value = await kind.validate(args);
  } catch (err) {
    if (err instanceof AwaError) throw err;
    // The kind's validator threw instead of returning issues, or the args could not even be read (a revoked
    // proxy fails the await's thenable check): either way a typed error, not the raw one.
    const reason = messageOf(err);
    if (kind.schema)
      throw new InvalidArgsError(kind.kind, [
        { message: `the kind's schema threw while validating: ${reason}` },
      ]);
    throw new PayloadNotSerialisableError(kind.kind, `args cannot be read (${reason})`);
  }
  return buildJobRow(kind, encodeArgs(kind.kind, value, maxPayloadBytes), options, now);
}

export function buildJobRow(
  kind: JobKind<unknown>,
  argsJson: string,
  options: JobOptions | undefined,
  now: number,
): JobRow {
  const o = options ?? {};
  if (options !== undefined) {
    validatePlainObject('options', options);
    if ('client' in options) {
      throw new InvalidOptionError(
        'options.client',
        'cannot be given per job: pass { client } as the second argument of enqueueMany or copyEnqueue (one transaction for the whole call)',
      );
    }
    rejectUnknownKeys('options', options, JOB_OPTION_KEYS);
  }
  const queue = o.queue === undefined ? kind.queue : validateName('queue', o.queue);
  const priority = o.priority === undefined ? kind.priority : validatePriority('priority', o.priority);
  const maxAttempts =
    o.maxAttempts === undefined ? kind.maxAttempts : validateMaxAttempts('maxAttempts', o.maxAttempts);
  let runAt: Date | null = null;
  if (o.runAt !== undefined) runAt = validateDate('runAt', o.runAt);
  if (o.delayMs !== undefined) {
    if (runAt) throw new InvalidOptionError('delayMs', 'give either runAt or delayMs, not both');
    runAt = new Date(now + validateInt('delayMs', o.delayMs, 0, 10 * 365 * 86_400_000));
  }
  if (runAt && runAt.getTime() <= now) runAt = null;
  const u = o.unique === undefined ? kind.unique : resolveUnique('unique', o.unique);
  const unique = u && {
    key: uniqueKey(u, kind.kind, queue, argsJson, runAt?.getTime() ?? now),
    states: u.states,
  };
  return {
    kind: kind.kind,
    queue,
    priority,
    argsJson,
    maxAttempts,
    runAt,
    metaJson: encodeMeta(o, unique),
    unique: unique !== undefined,
  };
}

function encodeMeta(o: JobOptions, unique: { key: string; states: string[] } | undefined): string | null {
  if (o.metadata === undefined && o.tags === undefined && unique === undefined) return null;
  const meta: Record<string, unknown> = {};
  if (o.metadata !== undefined) meta.metadata = validatePlainObject('metadata', o.metadata);
  if (o.tags !== undefined) meta.tags = validateTags('tags', o.tags);
  if (unique !== undefined) meta.unique = unique;
  return encodeArgs('metadata', meta, 64 * 1024, 'options');
}
