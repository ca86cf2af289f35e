import { InvalidOptionError } from './errors.js';
import type { JobKind } from './job-kind.js';
import { encodeArgs } from './payload.js';
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
}

const JOB_OPTION_KEYS = ['queue', 'priority', 'runAt', 'delayMs', 'maxAttempts', 'metadata', 'tags'] as const;

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
}

export async function toJobRow(
  kind: JobKind<unknown>,
  args: unknown,
  options: JobOptions | undefined,
  maxPayloadBytes: number,
  now: number = Date.now(),
): Promise<JobRow> {
  const value = await kind.validate(args);
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
  return { kind: kind.kind, queue, priority, argsJson, maxAttempts, runAt, metaJson: encodeMeta(o) };
}

function encodeMeta(o: JobOptions): string | null {
  if (o.metadata === undefined && o.tags === undefined) return null;
  const meta: Record<string, unknown> = {};
  if (o.metadata !== undefined) meta.metadata = validatePlainObject('metadata', o.metadata);
  if (o.tags !== undefined) meta.tags = validateTags('tags', o.tags);
  return encodeArgs('metadata', meta, 64 * 1024, 'options');
}
