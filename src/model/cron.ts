import { createHash } from 'node:crypto';
import { validateCronExpression, validateTimezone, type MissedFire } from './cron-schedule.js';
import { InvalidOptionError } from './errors.js';
import { checkArgs, defineJob, type JobKind } from './job-kind.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodeArgs } from './payload.js';
import { canonicalJson, resolveUnique, uniqueKey, type UniqueOptions } from './unique.js';
import {
  rejectUnknownKeys,
  validateMaxAttempts,
  validateName,
  validatePlainObject,
  validatePriority,
  validateTags,
  type Priority,
} from './validation.js';

// Cron schedules as worker code declares them: validated here, once, at declaration (expression, time zone,
// args against the kind's schema, job options), and turned into the row a host syncs to cron_jobs when it
// starts. The due-time arithmetic lives in cron-schedule.ts.

/** Job options a schedule's jobs are enqueued with (a subset of JobOptions: no runAt/delayMs). */
export interface CronJobOptions {
  queue?: string;
  priority?: Priority;
  maxAttempts?: number;
  metadata?: Record<string, unknown>;
  tags?: string[];
  /** Make each fire's job unique (a periodMs bucket counts from the fire time), or not, whatever its kind says. */
  unique?: UniqueOptions | boolean;
}

export interface CronOptions<Args = unknown> {
  /** Stable name of the schedule: the key it is stored, listed, paused and triggered by. */
  name: string;
  /** Cron expression: 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, 7 with a
   * year last, or a nickname (@hourly, @daily, @weekly, @monthly, @yearly). */
  cron: string;
  /** IANA time zone the expression is read in. Default "UTC". */
  timezone?: string;
  /** The kind of job each fire enqueues: a definition from defineJob (args are checked by its schema) or a
   * kind name. */
  kind: JobKind<Args> | string;
  args: Args;
  options?: CronJobOptions;
  /** After downtime: 'latest' (default) fires the latest missed occurrence once; 'skip' drops missed
   * occurrences and fires only the next one on time. */
  missedFire?: MissedFire;
}

/** A validated schedule declaration; pass it to a WorkerHost in `cron: [...]`. */
export interface CronDefinition {
  readonly name: string;
  readonly cron: string;
  readonly timezone: string;
  readonly kind: string;
  readonly missedFire: MissedFire;
}

/** A schedule as stored in cron_jobs. */
export interface CronRow {
  name: string;
  /** The cron expression. */
  cron: string;
  timezone: string;
  kind: string;
  queue: string;
  priority: Priority;
  argsJson: string;
  maxAttempts: number;
  /** The jobs' meta template: { metadata?, tags?, unique?: { key?, states, periodMs? } } or null. */
  metaJson: string | null;
  missedFire: MissedFire;
  /** Hash of everything above: a host's sync rewrites the row only when it differs. */
  hash: string;
}

const CRON_KEYS = ['name', 'cron', 'timezone', 'kind', 'args', 'options', 'missedFire'] as const;
const CRON_JOB_OPTION_KEYS = ['queue', 'priority', 'maxAttempts', 'metadata', 'tags', 'unique'] as const;

/** Rows of definitions made by defineCron (possibly still being checked by an async schema). */
const rows = new WeakMap<CronDefinition, Promise<CronRow>>();

/**
 * Declares a cron schedule. Everything is checked now, with an InvalidOptionError naming the field (or an
 * InvalidArgsError from the kind's schema); a schema that validates asynchronously is awaited when a host
 * starts with the definition. `now` is the instant from which the expression must still fire (default: now).
 */
export function defineCron<Args>(options: CronOptions<Args>, now: Date = new Date()): CronDefinition {
  validatePlainObject('cron', options);
  rejectUnknownKeys('cron', options, CRON_KEYS);
  const name = validateName('name', options.name);
  const timezone = options.timezone === undefined ? 'UTC' : validateTimezone('timezone', options.timezone);
  const cron = validateCronExpression('cron', options.cron, timezone, now);
  const missedFire = options.missedFire ?? 'latest';
  if (missedFire !== 'latest' && missedFire !== 'skip') {
    throw new InvalidOptionError('missedFire', `must be "latest" or "skip", got ${String(missedFire)}`);
  }
  const kind = kindOf(options.kind);
  const o = options.options ?? {};
  if (options.options !== undefined) {
    validatePlainObject('options', o);
    rejectUnknownKeys('options', o, CRON_JOB_OPTION_KEYS);
  }
  const queue = o.queue === undefined ? kind.queue : validateName('options.queue', o.queue);
  const priority =
    o.priority === undefined ? kind.priority : validatePriority('options.priority', o.priority);
  const maxAttempts =
    o.maxAttempts === undefined
      ? kind.maxAttempts
      : validateMaxAttempts('options.maxAttempts', o.maxAttempts);
  const meta: Record<string, unknown> = {};
  if (o.metadata !== undefined) meta.metadata = validatePlainObject('options.metadata', o.metadata);
  if (o.tags !== undefined) meta.tags = validateTags('options.tags', o.tags);
  const unique = o.unique === undefined ? kind.unique : resolveUnique('options.unique', o.unique);
  if (unique) meta.unique = unique;
  const metaJson = Object.keys(meta).length === 0 ? null : encodeArgs('metadata', meta, 64 * 1024, 'options');

  const toRow = (args: unknown): CronRow => {
    const argsJson = encodeArgs(kind.kind, args, DEFAULT_MAX_PAYLOAD_BYTES);
    const row = {
      name,
      cron,
      timezone,
      kind: kind.kind,
      queue,
      priority,
      argsJson,
      maxAttempts,
      metaJson,
      missedFire,
    };
    return { ...row, hash: definitionHash(row) };
  };
  const checked = checkArgs(kind, options.args);
  const row: Promise<CronRow> =
    checked instanceof Promise ? checked.then(toRow) : Promise.resolve(toRow(checked.value));
  // An async schema's rejection is reported when a host starts with this definition, not as unhandled.
  row.catch(() => {});
  const def: CronDefinition = Object.freeze({
    name,
    cron,
    timezone,
    kind: kind.kind,
    missedFire,
  });
  rows.set(def, row);
  return def;
}

/** Validates a host's `cron` option: definitions from defineCron, names unique. Returns them. */
export function validateCronList(field: string, value: unknown): CronDefinition[] {
  if (value === undefined) return [];
  if (!Array.isArray(value))
    throw new InvalidOptionError(field, 'must be an array of defineCron(...) results');
  const names = new Set<string>();
  value.forEach((def: unknown, i) => {
    if (typeof def !== 'object' || def === null || !rows.has(def as CronDefinition)) {
      throw new InvalidOptionError(`${field}[${i}]`, 'must be a schedule made by defineCron({...})');
    }
    const name = (def as CronDefinition).name;
    if (names.has(name)) throw new InvalidOptionError(`${field}[${i}]`, `declares schedule "${name}" twice`);
    names.add(name);
  });
  return value as CronDefinition[];
}

/** The stored row of a definition (waits for an async schema; rejects with its InvalidArgsError). */
export function cronRow(def: CronDefinition): Promise<CronRow> {
  const row = rows.get(def);
  if (!row) throw new InvalidOptionError('cron', 'must be a schedule made by defineCron({...})');
  return row;
}

/**
 * The meta.unique of one job of a schedule whose stored meta template carries a unique spec: the key is
 * derived as for any unique job, with the fire time (or trigger time) as the job's run time.
 */
export function cronUnique(
  spec: { key?: string; states: string[]; periodMs?: number } | null | undefined,
  kind: string,
  queue: string,
  argsJson: string,
  atMs: number,
): { key: string; states: string[] } | null {
  if (!spec) return null;
  const u = { key: spec.key, states: spec.states as never[], periodMs: spec.periodMs };
  return { key: uniqueKey(u, kind, queue, argsJson, atMs), states: spec.states };
}

// The expression is hashed under the name it had before it was `cron` (migration 019): a schedule's hash, and
// so its row, stays as it was across the upgrade, and hosts of both releases agree on it in a rolling deploy.
const HASHED_CRON_KEY = 'expression';

function definitionHash(row: Omit<CronRow, 'hash'>): string {
  const { argsJson, metaJson, cron, ...rest } = row;
  const canonical = canonicalJson({
    ...rest,
    [HASHED_CRON_KEY]: cron,
    args: JSON.parse(argsJson) as unknown,
    meta: metaJson === null ? null : (JSON.parse(metaJson) as unknown),
  });
  return createHash('sha256').update(canonical).digest('hex').slice(0, 32);
}

function kindOf(kind: unknown): JobKind<unknown> {
  if (typeof kind === 'string') return defineJob({ kind: validateName('kind', kind) });
  if (!kind || typeof (kind as JobKind).validate !== 'function') {
    throw new InvalidOptionError('kind', 'must be a kind name or a definition from defineJob()');
  }
  return kind as JobKind<unknown>;
}
