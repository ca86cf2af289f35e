import type { JobRecord } from '../storage/index.js';

// How the test helpers print values and jobs in their messages: one line each, JSON where the value is JSON,
// cut short past a width a terminal shows whole.

const WIDTH = 160;

/** A matcher or predicate by what it tests, for a message. */
function matcherName(value: unknown): string | null {
  if (typeof value === 'function') return `<predicate ${value.name || 'anonymous'}>`;
  const m = value as { asymmetricMatch?: unknown; toAsymmetricMatcher?: () => string } | null;
  if (typeof m?.asymmetricMatch !== 'function') return null;
  return `<${typeof m.toAsymmetricMatcher === 'function' ? m.toAsymmetricMatcher() : String(m)}>`;
}

/** One line for a value: JSON, with matchers, predicates and dates named. */
export function show(value: unknown, width = WIDTH): string {
  let text: string;
  if (value === undefined) text = 'undefined';
  else {
    const named = matcherName(value);
    if (named !== null) text = named;
    else if (value instanceof Date) text = `Date(${value.toISOString()})`;
    else {
      try {
        text = JSON.stringify(value, (_key, v: unknown) => {
          // JSON.stringify calls a Date's toJSON before the replacer: `v` is its string then.
          const n = matcherName(v);
          return n ?? (v === undefined ? '<undefined>' : v);
        });
      } catch {
        text = String(value);
      }
    }
  }
  return text.length > width ? `${text.slice(0, width - 1)}…` : text;
}

/** A job as a failed assertion lists it: id, state, queue, priority, run time when it waits for one, args. */
export function showJob(job: JobRecord): string {
  const when = job.runAt && (job.state === 'scheduled' || job.state === 'retryable');
  return (
    `job ${job.id} (${job.state}, queue ${JSON.stringify(job.queue)}, priority ${job.priority}` +
    `${when ? `, due ${job.runAt!.toISOString()}` : ''}) args ${show(job.args)}`
  );
}

/** "1 job" / "3 jobs". */
export function jobs(n: number): string {
  return `${n} job${n === 1 ? '' : 's'}`;
}
