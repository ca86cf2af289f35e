import { InvalidOptionError } from '../../model/errors.js';
import {
  validateLimitsOverride,
  type LimitsOverride,
  type QueueLimits,
  type RateLimit,
} from '../../model/limits.js';
import type { AwaClient } from '../../roles.js';
import type { QueueLimitsState } from '../../storage/index.js';
import { UsageError, type Parsed } from '../args.js';
import type { CliContext } from '../io.js';
import { print, table } from './common.js';

// awa queue limits [QUEUE] [--keys N]: what each limited queue's limits are, where each field comes from, and
// what they hold now. awa queue limits QUEUE --set FIELD=VALUE… --unset FIELD… --clear FIELD… | --reset: an
// operator's override of what the hosts declared (docs/cli.md, "Flow control"). The override is changed field by
// field: what a command does not name stays as it was.

export const limitsOptions = {
  keys: {
    type: 'number' as const,
    description: 'queue limits: how many of the busiest keys to show (default 20)',
  },
  set: {
    type: 'string' as const,
    multiple: true,
    description: 'queue limits: FIELD=VALUE, override a field (perKey.rate=100/1s,burst=20)',
  },
  unset: {
    type: 'string' as const,
    multiple: true,
    description: 'queue limits: FIELD, no limit there, whatever the code declares',
  },
  clear: {
    type: 'string' as const,
    multiple: true,
    description: 'queue limits: FIELD, drop its override: the declared value applies again',
  },
  reset: { type: 'boolean' as const, description: 'queue limits: drop the whole override' },
};

export const LIMITS_USAGE =
  'awa queue limits [QUEUE] [--keys N] | awa queue limits QUEUE (--set FIELD=VALUE | --unset FIELD | --clear FIELD)… | awa queue limits QUEUE --reset';

type Section = 'key' | 'perKey' | 'queue';
type Value = string | number | boolean | Required<RateLimit>;

interface Field {
  section: Section;
  name: string;
  /** A --set value as the override holds it; throws UsageError naming the flag. */
  parse(raw: string, flag: string): Value;
}

/** The fields an operator can override, by the name the flags and the output use. */
const FIELDS: Record<string, Field> = {
  'key.arg': { section: 'key', name: 'arg', parse: (raw) => raw },
  'perKey.concurrency': { section: 'perKey', name: 'concurrency', parse: count },
  'perKey.rate': { section: 'perKey', name: 'rate', parse: rate },
  'perKey.fifo': { section: 'perKey', name: 'fifo', parse: bool },
  'queue.concurrency': { section: 'queue', name: 'concurrency', parse: count },
  'queue.rate': { section: 'queue', name: 'rate', parse: rate },
};

const FIELD_NAMES = Object.keys(FIELDS).join(', ');

/** The first of this command's own options given, if any (they apply to `queue limits` only). */
export function limitsOptionGiven(values: Parsed['values']): string | null {
  return Object.keys(limitsOptions).find((k) => values[k] !== undefined) ?? null;
}

/** What a `queue limits` command line asks for, checked before anything connects: a read (null), a change of
 * fields, or a reset. A bad flag or value is a UsageError naming it. */
export type LimitsRequest = Change | null;

export function limitsRequest(queue: string | undefined, values: Parsed['values']): LimitsRequest {
  const change = changeOf(values);
  const keys = values.keys as number | undefined;
  if (change === null) {
    if (keys !== undefined && (!Number.isInteger(keys) || keys < 0 || keys > 1000))
      throw new UsageError(`--keys must be a whole number from 0 to 1000, got ${keys}`);
    return null;
  }
  if (queue === undefined) throw new UsageError(`name the queue to change: usage: ${LIMITS_USAGE}`);
  if (keys !== undefined) throw new UsageError('--keys applies to reading limits, not to changing them');
  // The values alone, checked now; merged with the queue's override they are checked again before the write.
  if (change !== 'reset') applyChange(null, change);
  return change;
}

export async function limitsCommand(
  client: AwaClient,
  queue: string | undefined,
  request: LimitsRequest,
  values: Parsed['values'],
  ctx: CliContext,
): Promise<number | void> {
  if (request === null) return showLimits(client, queue, values, ctx);
  const name = queue!;
  const next = request === 'reset' ? null : applyChange(await currentOverride(client, name), request);
  // The whole override is written at once: the fields this command did not name keep their value.
  const effective = await client.setQueueLimits(name, next, { create: values.create === true });
  return print(
    ctx,
    values,
    { queue: name, override: next, effective },
    `${name}: ${next === null ? 'override cleared; ' : ''}limits now: ${limitsLine(effective)}`,
  );
}

// ---- reading ----

async function showLimits(
  client: AwaClient,
  queue: string | undefined,
  values: Parsed['values'],
  ctx: CliContext,
): Promise<number | void> {
  const keys = values.keys as number | undefined;
  const states = await client.queueLimits({ ...(queue === undefined ? {} : { queue }), keys });
  if (queue === undefined)
    return print(
      ctx,
      values,
      states,
      states.length === 0 ? '(no queue has limits)' : states.map(queueText).join('\n\n'),
    );
  if (states.length === 0) {
    // A queue without limits answers as one with nothing limited; a name nothing uses is not found (exit 1),
    // as `queue show` says it.
    if (!(await client.queueHealth()).some((q) => q.queue === queue)) {
      if (values.json) ctx.out('null');
      ctx.err(`queue ${queue} not found`);
      return 1;
    }
    const none: QueueLimitsState = {
      queue,
      declared: null,
      override: null,
      effective: null,
      running: 0,
      waiting: 0,
      keys: [],
    };
    return print(ctx, values, none, `${queue}: no limits`);
  }
  return print(ctx, values, states[0], queueText(states[0]!));
}

/** One queue: its limits in a line, where each field comes from, what runs and waits now, its busiest keys. */
function queueText(s: QueueLimitsState): string {
  const fields = Object.keys(FIELDS).flatMap((name) => {
    const declared = valueAt(s.declared, name);
    const override = valueAt(s.override, name);
    if (declared === undefined && override === undefined) return [];
    return [
      {
        field: name,
        effective: show(valueAt(s.effective, name)),
        source: override === undefined ? 'declared' : override === null ? 'override: none' : 'override',
        declared: show(declared),
        override: override === null ? 'none' : show(override),
      },
    ];
  });
  return [
    `${s.queue}: ${limitsLine(s.effective)}`,
    `now: ${s.running} running, ${s.waiting} waiting at the gate`,
    table(fields),
    '',
    table(
      s.keys.map((k) => ({
        key: k.key === '' ? '(no key)' : k.key,
        running: k.running,
        waiting: k.waiting,
        'recent starts': k.recentStarts,
      })),
      '(no key running or waiting)',
    ),
  ].join('\n');
}

/** The limits in effect, in a line: `per key (args.tenant): 3 running, 100/1s (burst 100); queue: 50 running`. */
export function limitsLine(limits: QueueLimits | null): string {
  if (!limits) return 'none';
  const parts: string[] = [];
  const p = limits.perKey;
  if (p) {
    const what = [
      p.concurrency !== undefined ? `${p.concurrency} running` : null,
      p.rate ? rateText(p.rate) : null,
      p.fifo ? 'strict FIFO' : null,
    ].filter((x) => x !== null);
    parts.push(`per key${limits.key ? ` (args.${limits.key.arg})` : ''}: ${what.join(', ')}`);
  }
  const q = limits.queue;
  if (q) {
    const what = [
      q.concurrency !== undefined ? `${q.concurrency} running` : null,
      q.rate ? rateText(q.rate) : null,
    ];
    parts.push(`queue: ${what.filter((x) => x !== null).join(', ')}`);
  }
  return parts.join('; ');
}

/** `100/1s (burst 100)`: the form --set takes, the burst said. */
export function rateText(r: RateLimit): string {
  return `${r.limit}/${periodText(r.periodMs ?? 1000)} (burst ${r.burst ?? r.limit})`;
}

function periodText(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

function show(value: unknown): string {
  if (value === undefined || value === null) return '-';
  if (typeof value === 'object') return rateText(value as RateLimit);
  return String(value);
}

/** A field's value in limits or an override: undefined when absent, null when an override removes it (the
 * field or its whole section null). */
function valueAt(limits: LimitsOverride | QueueLimits | null, name: string): unknown {
  const { section, name: key } = FIELDS[name]!;
  const s = (limits as Record<string, Record<string, unknown> | null | undefined> | null)?.[section];
  if (s === null) return null;
  return s?.[key];
}

// ---- changing ----

type Change = 'reset' | { set: [string, Value][]; unset: string[]; clear: string[] };

function changeOf(values: Parsed['values']): Change | null {
  const list = (name: string) => (values[name] as string[] | undefined) ?? [];
  const sets = list('set');
  const unset = list('unset');
  const clear = list('clear');
  if (values.reset === true) {
    if (sets.length + unset.length + clear.length > 0)
      throw new UsageError(
        '--reset drops the whole override: give it alone, without --set, --unset or --clear',
      );
    return 'reset';
  }
  if (sets.length + unset.length + clear.length === 0) return null;
  const named = new Set<string>();
  const once = (name: string, flag: string) => {
    if (!FIELDS[name])
      throw new UsageError(`${flag} ${name}: not a field of the limits (fields: ${FIELD_NAMES})`);
    if (named.has(name)) throw new UsageError(`${flag} ${name}: the field is named twice in this command`);
    named.add(name);
    return name;
  };
  const set = sets.map((raw): [string, Value] => {
    const eq = raw.indexOf('=');
    if (eq < 1) throw new UsageError(`--set ${raw}: write FIELD=VALUE, e.g. --set perKey.rate=100/1s`);
    const name = once(raw.slice(0, eq), '--set');
    return [name, FIELDS[name]!.parse(raw.slice(eq + 1), `--set ${name}`)];
  });
  return { set, unset: unset.map((n) => once(n, '--unset')), clear: clear.map((n) => once(n, '--clear')) };
}

async function currentOverride(client: AwaClient, queue: string): Promise<LimitsOverride | null> {
  const [state] = await client.queueLimits({ queue, keys: 0 });
  return state?.override ?? null;
}

/** The override with the command's fields changed, checked as the client checks it: an error names the flag. */
function applyChange(
  current: LimitsOverride | null,
  change: Exclude<Change, 'reset'>,
): LimitsOverride | null {
  const next = structuredClone(current ?? {}) as Record<string, Record<string, unknown> | null>;
  const put = (name: string, value: unknown) => {
    const { section, name: key } = FIELDS[name]!;
    // A section the override removed whole comes back as the fields named now.
    const s = (next[section] ??= {});
    if (value === undefined) delete s[key];
    else s[key] = value;
    if (Object.keys(s).length === 0) delete next[section];
  };
  // The key's source is a section of one field, { arg }: it is set, removed or cleared whole.
  for (const [name, value] of change.set) {
    if (name === 'key.arg') next.key = { arg: value };
    else put(name, value);
  }
  for (const name of change.unset) {
    if (name === 'key.arg') next.key = null;
    else put(name, null);
  }
  for (const name of change.clear) {
    if (name === 'key.arg') delete next.key;
    else put(name, undefined);
  }
  if (Object.keys(next).length === 0) return null;
  try {
    return validateLimitsOverride('limits', next);
  } catch (err) {
    if (!(err instanceof InvalidOptionError)) throw err;
    throw new UsageError(
      `${flagOf(err.field, change)} ${err.message.replace(/^Invalid option "[^"]*": /, '')}`,
    );
  }
}

/** Who an error is about, for its message: the flag that set the field it names, with the part of the value
 * (`limits.perKey.rate.burst` → `--set perKey.rate: burst`), else the field of the override. */
function flagOf(field: string, change: Exclude<Change, 'reset'>): string {
  const name = Object.keys(FIELDS).find((n) => `${field}.`.startsWith(`limits.${n}.`));
  if (!name || !change.set.some(([n]) => n === name)) return `${field.replace(/^limits\./, '')}:`;
  const part = field.slice(`limits.${name}`.length + 1);
  return `--set ${name}:${part ? ` ${part}` : ''}`;
}

// ---- values ----

function count(raw: string, flag: string): number {
  if (!/^\d+$/.test(raw)) throw new UsageError(`${flag}=${raw}: must be a whole number, e.g. ${flag}=3`);
  return Number(raw);
}

function bool(raw: string, name: string): boolean {
  if (raw !== 'true' && raw !== 'false') throw new UsageError(`${name}=${raw}: must be true or false`);
  return raw === 'true';
}

const PERIOD_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** `LIMIT/PERIOD[,burst=N]`: 100/1s, 20/500ms, 1000/1m,burst=50 (a period without a number is one unit: 10/s). */
function rate(raw: string, flag: string): Required<RateLimit> {
  const m = /^(\d+)\/(\d*)(ms|s|m|h)(?:,burst=(\d+))?$/.exec(raw);
  if (!m)
    throw new UsageError(
      `${flag}=${raw}: write the rate as LIMIT/PERIOD with a period in ms, s, m or h, and optionally ,burst=N ` +
        `(e.g. ${flag}=100/1s or ${flag}=1000/1m,burst=50)`,
    );
  const limit = Number(m[1]);
  return {
    limit,
    periodMs: Number(m[2] || '1') * PERIOD_MS[m[3]!]!,
    burst: m[4] === undefined ? limit : Number(m[4]),
  };
}
