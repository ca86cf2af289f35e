import { InvalidOptionError } from './errors.js';
import { rejectUnknownKeys, validateInt, validatePlainObject } from './validation.js';

// Flow control (docs/flow-control.md): limits on a queue's starts that hold across every host, decided by the
// database in the claim. Declared in a worker host's queue options; an operator can override them field by
// field (CLI, dashboard). Validated here, once, with errors that name the field.

/** At most `limit` starts in any window of `periodMs` (a sliding window, exact), and at most `burst` in any
 * window of periodMs × burst / limit: a small burst spreads the starts evenly. */
export interface RateLimit {
  limit: number;
  /** Default 1000 (per second). At most one day. */
  periodMs?: number;
  /** Default `limit` (the whole window's starts may come at once). */
  burst?: number;
}

export interface QueueLimits {
  /** Where a job's key comes from when it was not given at enqueue (`limitKey`): a field of its args, by a
   * dotted path (`tenant`, `account.id`). Jobs with neither share the key ''. */
  key?: { arg: string };
  /** Limits of each key. */
  perKey?: {
    /** Attempts of one key running at once across the fleet. */
    concurrency?: number;
    rate?: RateLimit;
    /** Strict FIFO per key: one attempt at a time (concurrency 1), in enqueue order, and a job that will retry
     * keeps its key until it ran again. */
    fifo?: boolean;
  };
  /** Limits of the whole queue. */
  queue?: {
    /** Attempts of the queue running at once across the fleet (whatever the number of hosts). */
    concurrency?: number;
    rate?: RateLimit;
  };
}

/** An operator's override: the same fields, each also null (removes the declared field), a section null
 * removes the section. */
export type LimitsOverride = {
  key?: { arg: string } | null;
  perKey?: { concurrency?: number | null; rate?: RateLimit | null; fifo?: boolean | null } | null;
  queue?: { concurrency?: number | null; rate?: RateLimit | null } | null;
};

const MAX_PERIOD_MS = 24 * 60 * 60 * 1000;
const MAX_COUNT = 1_000_000;
/** A rate's log keeps its `limit` most recent starts in one row. */
const MAX_RATE_LIMIT = 10_000;

export function validateRate(field: string, value: unknown): Required<RateLimit> {
  const r = validatePlainObject(field, value);
  rejectUnknownKeys(field, r, ['limit', 'periodMs', 'burst']);
  const limit = validateInt(`${field}.limit`, r.limit, 1, MAX_RATE_LIMIT);
  const periodMs =
    r.periodMs === undefined ? 1000 : validateInt(`${field}.periodMs`, r.periodMs, 1, MAX_PERIOD_MS);
  const burst = r.burst === undefined ? limit : validateInt(`${field}.burst`, r.burst, 1, limit);
  return { limit, periodMs, burst };
}

function validateKeySource(field: string, value: unknown): { arg: string } {
  const k = validatePlainObject(field, value);
  rejectUnknownKeys(field, k, ['arg']);
  if (typeof k.arg !== 'string' || k.arg === '' || k.arg.split('.').some((p) => p === ''))
    throw new InvalidOptionError(`${field}.arg`, 'must be an args field name or dotted path, like "tenant"');
  return { arg: k.arg };
}

/** Validates declared limits; `field` names them in errors (`queues.api.limits`). Returns them with defaults
 * filled in, or null when nothing is limited. */
export function validateLimits(field: string, value: unknown): QueueLimits | null {
  const l = validatePlainObject(field, value);
  rejectUnknownKeys(field, l, ['key', 'perKey', 'queue']);
  const out: QueueLimits = {};
  if (l.key !== undefined) out.key = validateKeySource(`${field}.key`, l.key);
  if (l.perKey !== undefined) {
    const f = `${field}.perKey`;
    const p = validatePlainObject(f, l.perKey);
    rejectUnknownKeys(f, p, ['concurrency', 'rate', 'fifo']);
    const perKey: NonNullable<QueueLimits['perKey']> = {};
    if (p.fifo !== undefined && typeof p.fifo !== 'boolean')
      throw new InvalidOptionError(`${f}.fifo`, 'must be true or false');
    if (p.fifo === true && p.concurrency !== undefined && p.concurrency !== 1)
      throw new InvalidOptionError(
        `${f}.concurrency`,
        'must be 1 (or left out) with fifo: strict FIFO runs one at a time',
      );
    if (p.concurrency !== undefined)
      perKey.concurrency = validateInt(`${f}.concurrency`, p.concurrency, 1, MAX_COUNT);
    if (p.fifo === true) {
      perKey.fifo = true;
      perKey.concurrency = 1;
    }
    if (p.rate !== undefined) perKey.rate = validateRate(`${f}.rate`, p.rate);
    if (Object.keys(perKey).length > 0) out.perKey = perKey;
  }
  if (l.queue !== undefined) {
    const f = `${field}.queue`;
    const q = validatePlainObject(f, l.queue);
    rejectUnknownKeys(f, q, ['concurrency', 'rate']);
    const queue: NonNullable<QueueLimits['queue']> = {};
    if (q.concurrency !== undefined)
      queue.concurrency = validateInt(`${f}.concurrency`, q.concurrency, 1, MAX_COUNT);
    if (q.rate !== undefined) queue.rate = validateRate(`${f}.rate`, q.rate);
    if (Object.keys(queue).length > 0) out.queue = queue;
  }
  return out.perKey || out.queue ? out : null;
}

/** Validates an operator's override: like validateLimits(), each field or section may also be null. */
export function validateLimitsOverride(field: string, value: unknown): LimitsOverride {
  const l = validatePlainObject(field, value);
  rejectUnknownKeys(field, l, ['key', 'perKey', 'queue']);
  const out: LimitsOverride = {};
  if (l.key !== undefined) out.key = l.key === null ? null : validateKeySource(`${field}.key`, l.key);
  for (const section of ['perKey', 'queue'] as const) {
    const given = l[section];
    if (given === undefined) continue;
    if (given === null) {
      out[section] = null;
      continue;
    }
    const f = `${field}.${section}`;
    const s = validatePlainObject(f, given);
    rejectUnknownKeys(f, s, section === 'perKey' ? ['concurrency', 'rate', 'fifo'] : ['concurrency', 'rate']);
    const v: Record<string, unknown> = {};
    if (s.concurrency !== undefined)
      v.concurrency =
        s.concurrency === null ? null : validateInt(`${f}.concurrency`, s.concurrency, 1, MAX_COUNT);
    if (s.rate !== undefined) v.rate = s.rate === null ? null : validateRate(`${f}.rate`, s.rate);
    if (section === 'perKey' && s.fifo !== undefined) {
      if (s.fifo !== null && typeof s.fifo !== 'boolean')
        throw new InvalidOptionError(`${f}.fifo`, 'must be true, false or null');
      v.fifo = s.fifo;
      if (s.fifo === true) v.concurrency = 1;
    }
    out[section] = v;
  }
  return out;
}
