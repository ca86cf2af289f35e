import { AwaError, InvalidArgsError, InvalidOptionError, messageOf } from './errors.js';
import { checkArgs, type JobKind } from './job-kind.js';
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
  /** The key a limited queue counts this job under (docs/flow-control.md), instead of the args field its
   * limits name. 1 to 200 characters. */
  limitKey?: string;
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
  'limitKey',
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

/**
 * The row of one job: args checked against the kind's schema, encoded, options validated. Synchronous unless
 * the kind's schema is asynchronous (then a Promise); either way failures are the typed errors, thrown or
 * rejected.
 */
export function toJobRow(
  kind: JobKind<unknown>,
  args: unknown,
  options: JobOptions | undefined,
  maxPayloadBytes: number,
  now: number = Date.now(),
): JobRow | Promise<JobRow> {
  const build = (value: unknown) =>
    buildJobRow(kind, encodeArgs(kind.kind, value, maxPayloadBytes), options, now);
  if (!kind.schema) return build(args);
  let checked: { value: unknown } | Promise<unknown>;
  try {
    checked = checkArgs(kind, args);
  } catch (err) {
    throw validationFailure(kind, err);
  }
  if (checked instanceof Promise)
    return checked.then(build, (err: unknown) => {
      throw validationFailure(kind, err);
    });
  return build(checked.value);
}

/** A schema that threw instead of returning issues: a typed error, not the raw one. */
function validationFailure(kind: JobKind<unknown>, err: unknown): AwaError {
  if (err instanceof AwaError) return err;
  return new InvalidArgsError(kind.kind, [
    { message: `the kind's schema threw while validating: ${messageOf(err)}` },
  ]);
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
  if (o.metadata === undefined && o.tags === undefined && unique === undefined && o.limitKey === undefined)
    return null;
  const meta: Record<string, unknown> = {};
  if (o.metadata !== undefined) meta.metadata = validatePlainObject('metadata', o.metadata);
  if (o.tags !== undefined) meta.tags = validateTags('tags', o.tags);
  if (unique !== undefined) meta.unique = unique;
  if (o.limitKey !== undefined) {
    if (typeof o.limitKey !== 'string' || o.limitKey.length < 1 || o.limitKey.length > 200)
      throw new InvalidOptionError('limitKey', 'must be a string of 1 to 200 characters, like a tenant id');
    meta.limitKey = o.limitKey;
  }
  return encodeArgs('metadata', meta, 64 * 1024, 'options');
}
