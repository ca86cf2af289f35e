import { AwaError, InvalidOptionError } from './errors.js';
import { MAX_DELAY_MS } from './outcomes.js';

// Durable steps (ctx.step, ctx.sleep: docs/durable-steps.md): the rules a step's name and a sleep's time must
// keep, checked at the handler's call before anything is written, and the errors a handler meets.

/** Most steps (sleeps included) one job may record over all its attempts: a handler that names steps in a
 * loop without bound would otherwise grow its job's rows without bound. */
export const MAX_STEPS_PER_JOB = 1_000;

/** Longest step name, in UTF-16 code units. */
export const MAX_STEP_NAME_LENGTH = 200;

/** Names that start with this are Awa's own (a sleep's wake time is recorded as `awa:sleep…`). */
export const RESERVED_STEP_PREFIX = 'awa:';

/** A step's name or function is not one step() can take; `field` says which. */
export class InvalidStepError extends AwaError {
  constructor(
    readonly field: 'name' | 'fn',
    message: string,
  ) {
    super('AWA_INVALID_STEP', `Invalid step ${field}: ${message}`);
  }
}

/** The handler called step() (or sleep() with a name) twice with one name in one attempt. Names must be unique
 * per job, or the second call would get the first one's recorded result back on a replay. */
export class DuplicateStepError extends AwaError {
  constructor(readonly stepName: string) {
    super(
      'AWA_DUPLICATE_STEP',
      `Step ${JSON.stringify(stepName)} was already run in this attempt: a step's name must be unique within its job ` +
        "(a replay returns a name's recorded result, so a second step of that name would never run). In a loop, " +
        'put the index in the name (`fetch-page-${i}`).',
    );
  }
}

/** The job already recorded MAX_STEPS_PER_JOB steps; nothing more is recorded for it. */
export class StepLimitError extends AwaError {
  constructor(
    readonly jobId: string,
    readonly limit: number,
  ) {
    super(
      'AWA_STEP_LIMIT',
      `Job ${jobId} has recorded ${limit} steps, the most one job may: make steps coarser (one step per batch of ` +
        'work, not per item), or split the work into jobs of their own.',
    );
  }
}

/** step() or sleep() in a handler that runs on a worker thread (execution: 'pool'). */
export class StepsNeedInlineError extends AwaError {
  constructor(kind: string, call: string) {
    super(
      'AWA_STEPS_NEED_INLINE',
      `ctx.${call}() was called by job kind "${kind}", which runs on a worker thread (execution: 'pool'): durable ` +
        "steps and sleeps need execution: 'inline'. Give the kind execution: 'inline' and move its CPU-heavy part " +
        'into a kind of its own that runs on the pool.',
    );
  }
}

/** The name as given, when step() can take it; throws InvalidStepError otherwise. Reserved names are refused so
 * that a user's step can never read a sleep's record as its own. */
export function checkStepName(name: unknown): string {
  if (typeof name !== 'string') throw new InvalidStepError('name', `must be a string, got ${typeof name}`);
  if (name.length === 0) throw new InvalidStepError('name', 'must not be empty');
  if (name.length > MAX_STEP_NAME_LENGTH) {
    throw new InvalidStepError(
      'name',
      `must be at most ${MAX_STEP_NAME_LENGTH} characters, got ${name.length} (${JSON.stringify(name.slice(0, 40))}…)`,
    );
  }
  if (name.startsWith(RESERVED_STEP_PREFIX)) {
    throw new InvalidStepError('name', `${JSON.stringify(name)}: names starting with "awa:" are Awa's own`);
  }
  if (name !== name.toWellFormed() || name.includes('\u0000')) {
    throw new InvalidStepError(
      'name',
      'must not hold U+0000 or a lone UTF-16 surrogate (PostgreSQL cannot store it)',
    );
  }
  return name;
}

/** The record name of a sleep: the handler's name for it, or its place among the attempt's unnamed sleeps. */
export function sleepRecordName(name: string | undefined, ordinal: number): string {
  return name === undefined
    ? `${RESERVED_STEP_PREFIX}sleep#${ordinal}`
    : `${RESERVED_STEP_PREFIX}sleep:${name}`;
}

/** The wake time of ctx.sleep(ms) begun at `now`; throws InvalidOptionError for a time a snooze cannot carry. */
export function wakeAfter(ms: unknown, now: number): Date {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_DELAY_MS) {
    throw new InvalidOptionError(
      'sleep.ms',
      `must be a number of milliseconds from 0 to ${MAX_DELAY_MS} (a year), got ${String(ms)}`,
    );
  }
  return new Date(now + ms);
}

/** The wake time of ctx.sleepUntil(at), checked like a sleep's. */
export function wakeAt(at: unknown, now: number): Date {
  const ms = at instanceof Date ? at.getTime() : Number.NaN;
  if (!Number.isFinite(ms) || ms - now > MAX_DELAY_MS) {
    throw new InvalidOptionError(
      'sleepUntil.at',
      `must be a valid Date at most a year ahead, got ${String(at)}`,
    );
  }
  return new Date(ms);
}
