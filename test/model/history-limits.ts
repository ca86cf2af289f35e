// A history's limited queue (docs/flow-control.md, docs/correctness.md): its limits, the keys its jobs carry,
// how its receipts are read from the database, and the checks and figures of what the run recorded of it.
import type pg from 'pg';
import type { Schema } from '../../src/storage/operations.js';
import type { HistoryEvent } from './history-events.js';

/** A limited queue of a history: its limits as a host declares them, and how many keys its jobs spread over. */
export interface HistoryLimits {
  queue: string;
  keyConcurrency: number;
  rate: { limit: number; periodMs: number; burst: number };
  queueConcurrency: number;
  keys: number;
}

/** The limited queue of the histories: 2 attempts per key over 4 keys, 20 starts per key per 500 ms (10 in any
 * 250 ms), 5 attempts of the queue. Each binds at some point of a run. */
export const HISTORY_LIMITS: HistoryLimits = {
  queue: 'hq_lim',
  keyConcurrency: 2,
  rate: { limit: 20, periodMs: 500, burst: 10 },
  queueConcurrency: 5,
  keys: 4,
};

/** The limits as a host's queue options declare them. */
export function declaredLimits(l: HistoryLimits) {
  return {
    key: { arg: 'tenant' },
    perKey: { concurrency: l.keyConcurrency, rate: l.rate },
    queue: { concurrency: l.queueConcurrency },
  };
}

/** The key of a job of a limited queue, from its uid: the checker derives it the same way. */
export function keyOfUid(uid: string, keys: number): string {
  let h = 0;
  for (const ch of uid) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return `t${h % keys}`;
}

/** Each receipt of limited queue `queue` in the ring: its claim time (µs since the epoch) and the members it
 * started, with their keys. Members the claim sent to the gate are closed 'settled' at that very time, so they
 * are left out. */
export async function limitedReceipts(
  c: pg.ClientBase,
  schema: Schema,
  queue: string,
): Promise<{ receipt: string; at_us: string; jobs: [string, string][] }[]> {
  const s = schema.ident;
  const { rows } = await c.query<{ receipt: string; at_us: string; jobs: [string, string][] }>(
    `select b.lane_id || ':' || b.batch_id || ':' || b.claimed_at as receipt,
            (extract(epoch from b.claimed_at) * 1000000)::bigint::text as at_us,
            json_agg(json_build_array(r.job_id::text, coalesce(r.meta ->> 'limitKey', r.args ->> 'tenant', ''))
                     order by m.idx) as jobs
       from ${s}.claim_batches b
       join ${s}.lanes ln on ln.lane_id = b.lane_id and ln.queue = $1
      cross join lateral ${s}.receipt_members(b.slot, b.batch_id) m
       join ${s}.ready_entries r on r.slot = m.ready_slot and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq
      where not exists (select 1 from ${s}.closure_batches x
                         where x.slot = b.slot and x.batch_id = b.batch_id and x.outcome = 'settled'
                           and x.closed_at = b.claimed_at and x.idxs @> m.idx)
      group by b.lane_id, b.batch_id, b.claimed_at`,
    [queue],
  );
  return rows;
}

/** What a history's report says of its limited queue. */
export interface LimitedFigures {
  dbStarts: number;
  seenAttempts: number;
  samples: number;
  maxSampledPerKey: number;
  maxSampledQueue: number;
  maxSeenPerKey: number;
  maxSeenQueue: number;
  /** The most starts of one key the database recorded in any window of the rate's period, and of its
   * burst window. */
  maxStartsPerPeriod: number;
  maxStartsPerBurstWindow: number;
}

/**
 * A limited queue's limits held at every instant (docs/flow-control.md), from three sources:
 * - the running attempts per key the sampler read from the database: never more than the key's concurrency,
 *   and the queue's never more than its concurrency;
 * - the attempts the history saw, each from its claim's answer to the first sign that it ended (its handler
 *   stopped, its settlement or rescue was sent). That interval lies inside the attempt's life in the database,
 *   so more than K of them overlapping at an instant is more than K running then;
 * - the starts the database recorded (receipts' claim times, members sent to the gate left out): per key, at
 *   most `limit` in any window of `periodMs` and `burst` in any window of periodMs × burst / limit.
 */
export function limitsHeld(events: readonly HistoryEvent[], l: HistoryLimits): string[] {
  const v: string[] = [];
  for (const e of events) {
    if (e.op !== 'running_sampled') continue;
    let total = 0;
    for (const [key, n] of Object.entries(e.byKey)) {
      total += n;
      if (n > l.keyConcurrency)
        v.push(`#${e.n}: key ${key} had ${n} attempts running (limit ${l.keyConcurrency})`);
    }
    if (total > l.queueConcurrency)
      v.push(`#${e.n}: queue ${l.queue} had ${total} attempts running (limit ${l.queueConcurrency})`);
  }
  for (const [key, n] of maxOverlap(attemptIntervals(events, l))) {
    if (key === '*' ? n > l.queueConcurrency : n > l.keyConcurrency)
      v.push(`${key === '*' ? `queue ${l.queue}` : `key ${key}`}: ${n} attempts seen running at once`);
  }
  if (events.some((e) => e.op === 'receipts_complete')) {
    // Every attempt the history saw started in the database: the rate was judged on every start.
    const recorded = new Map<string, number>();
    for (const e of events)
      if (e.op === 'receipt') for (const j of e.jobs) recorded.set(j.id, (recorded.get(j.id) ?? 0) + 1);
    const seen = new Map<string, number>();
    for (const i of attemptIntervals(events, l)) seen.set(i.id, (seen.get(i.id) ?? 0) + 1);
    for (const [id, n] of seen)
      if ((recorded.get(id) ?? 0) < n)
        v.push(`job ${id}: ${n} attempts seen, ${recorded.get(id) ?? 0} starts in the database's receipts`);
  }
  for (const [key, ts] of dbStarts(events)) {
    for (const w of rateWindows(l))
      for (let i = 0; i + w.n < ts.length; i++)
        if (ts[i + w.n]! - ts[i]! < w.us) {
          v.push(
            `key ${key}: ${w.n + 1} starts within ${(ts[i + w.n]! - ts[i]!) / 1000} ms (at most ${w.n} per ${w.us / 1000} ms)`,
          );
          break;
        }
  }
  return v;
}

/** The starts the database recorded per key (µs since the epoch), in order. */
function dbStarts(events: readonly HistoryEvent[]): Map<string, number[]> {
  const starts = new Map<string, number[]>();
  for (const e of events)
    if (e.op === 'receipt') for (const j of e.jobs) starts.set(j.key, [...(starts.get(j.key) ?? []), e.atUs]);
  for (const ts of starts.values()) ts.sort((a, b) => a - b);
  return starts;
}

/** A rate's two bounds: `limit` starts per period, `burst` per periodMs × burst / limit (in µs). */
function rateWindows(l: HistoryLimits): { n: number; us: number }[] {
  return [
    { n: l.rate.limit, us: l.rate.periodMs * 1000 },
    { n: l.rate.burst, us: ((l.rate.periodMs * l.rate.burst) / l.rate.limit) * 1000 },
  ];
}

/** The most of sorted times `ts` inside one window (t - us, t]. */
function mostInWindow(ts: readonly number[], us: number): number {
  let most = 0;
  for (let i = 0, j = 0; j < ts.length; j++) {
    while (ts[i]! <= ts[j]! - us) i++;
    most = Math.max(most, j - i + 1);
  }
  return most;
}

interface Interval {
  id: string;
  key: string;
  start: number;
  end: number;
}

/** Each attempt of the limited queue the history saw: from its claim's answer (or its handler's start) to the
 * earliest sign it ended. */
function attemptIntervals(events: readonly HistoryEvent[], l: HistoryLimits): Interval[] {
  const queueOf = new Map<string, string>();
  for (const e of events) if (e.op === 'enqueue') for (const u of e.uids) queueOf.set(u, e.queue);
  const ends = new Map<string, number>();
  const ended = (id: string, lease: number, t: number) => {
    const k = `${id}:${lease}`;
    ends.set(k, Math.min(t, ends.get(k) ?? Infinity));
  };
  for (const e of events) {
    if (e.op === 'attempts_ended') for (const a of e.attempts) ended(a.id, a.runLease, e.t);
    if (e.op === 'rescued') for (const s of e.items) ended(s.id, s.runLease, e.sentT ?? e.t);
  }
  const out: Interval[] = [];
  for (const e of events) {
    if (e.op !== 'claimed') continue;
    for (const j of e.jobs) {
      if (queueOf.get(j.uid) !== l.queue) continue;
      out.push({
        id: j.id,
        key: keyOfUid(j.uid, l.keys),
        start: e.t,
        end: ends.get(`${j.id}:${j.runLease}`) ?? Infinity,
      });
    }
  }
  return out;
}

/** The most intervals open at one instant, per key and ('*') overall. An interval is [start, end): one that
 * starts when another ends is not counted with it. */
function maxOverlap(intervals: readonly Interval[]): Map<string, number> {
  const max = new Map<string, number>();
  const sweep = (name: string, list: readonly Interval[]) => {
    const points = list.flatMap((i) =>
      i.end > i.start ? [[i.start, 1] as const, [i.end, -1] as const] : [],
    );
    points.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let open = 0;
    let most = 0;
    for (const [, d] of points) most = Math.max(most, (open += d));
    max.set(name, most);
  };
  sweep('*', intervals);
  for (const key of new Set(intervals.map((i) => i.key)))
    sweep(
      key,
      intervals.filter((i) => i.key === key),
    );
  return max;
}

export function limitedFigures(events: readonly HistoryEvent[], l: HistoryLimits): LimitedFigures {
  const samples = events.filter((e) => e.op === 'running_sampled');
  const overlap = maxOverlap(attemptIntervals(events, l));
  const [period, burst] = rateWindows(l);
  const most = (us: number) =>
    Math.max(0, ...[...dbStarts(events).values()].map((ts) => mostInWindow(ts, us)));
  return {
    maxStartsPerPeriod: most(period!.us),
    maxStartsPerBurstWindow: most(burst!.us),
    dbStarts: events.reduce((n, e) => n + (e.op === 'receipt' ? e.jobs.length : 0), 0),
    seenAttempts: attemptIntervals(events, l).length,
    samples: samples.length,
    maxSampledPerKey: Math.max(0, ...samples.flatMap((e) => Object.values(e.byKey))),
    maxSampledQueue: Math.max(0, ...samples.map((e) => Object.values(e.byKey).reduce((a, b) => a + b, 0))),
    maxSeenPerKey: Math.max(0, ...[...overlap].filter(([k]) => k !== '*').map(([, n]) => n)),
    maxSeenQueue: overlap.get('*') ?? 0,
  };
}
