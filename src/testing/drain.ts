import { setTimeout as sleep } from 'node:timers/promises';
import { rejectUnknownKeys, validateInt, validateName, validatePlainObject } from '../model/validation.js';
import { ringStorage } from '../storage/index.js';
import {
  emptyResult,
  leftIn,
  record,
  recordTimedOut,
  type DrainLeft,
  type DrainResult,
} from './drain-result.js';
import { DrainIncompleteError } from './errors.js';
import { handlerList, queuesOf, type Handlers } from './handlers.js';
import { TestHost } from './test-host.js';
import type { TestSchema } from './test-schema.js';

// drainQueue(): runs the jobs of some queues with a real worker host until they are idle: nothing available,
// nothing running, nothing due. Due jobs are promoted by the drain itself between rounds (the host takes no part
// in maintenance), so a retry whose backoff has passed runs in this drain, and one whose backoff has not does
// not, unless the test advances the schema's clock, or lets the drain advance it (`advanceUpToMs`). It is
// bounded twice, in settlements and in time, and reports what is left either way.

export interface DrainOptions {
  /** The queues to drain. Default: those the handlers' kinds go to. */
  queues?: readonly string[];
  /** Jobs of each queue running at once. Default 1: jobs run one after another, in queue order. */
  concurrency?: number;
  /** The queues send jobs that fail for good to the dead-letter queue. Default false. */
  dlq?: boolean;
  /** When idle but for jobs waiting for a run time (or callback timeouts), advance the test schema's clock to
   * the next one, as long as the drain's advances add up to no more than this. Default 0: never. */
  advanceUpToMs?: number;
  /** Give up after this many settlements (a job that snoozes for ever would otherwise never end). Default 1,000. */
  maxSettlements?: number;
  /** Give up after this long. Default 30 s. */
  timeoutMs?: number;
}

const KEYS = ['queues', 'concurrency', 'dlq', 'advanceUpToMs', 'maxSettlements', 'timeoutMs'] as const;
/** Between two looks at the queues: short, as the settlements it waits for take a few ms each. */
const ROUND_MS = 10;
/** Most due jobs (and expired callbacks) one round promotes. */
const PROMOTE_LIMIT = 10_000;

interface Drain {
  t: TestSchema;
  test: TestHost;
  queues: string[];
  result: DrainResult;
  /** Handlers started and settlements written so far: what the host did, as a count that only grows. */
  activity: number;
  /** `activity` when the last look found the queues idle; null when it did not. */
  quietAt: number | null;
}

/** Runs the jobs of the handlers' queues (or `options.queues`) until they are idle; returns what it did and
 * what is left. Fails with DrainIncompleteError (its `result` holds both) when a bound comes first. */
export async function drainQueue(
  t: TestSchema,
  handlers: Handlers,
  options: DrainOptions = {},
): Promise<DrainResult> {
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options, KEYS);
  const list = handlerList(handlers);
  const queues = (options.queues ?? queuesOf(list)).map((q, i) => validateName(`queues[${i}]`, q));
  const concurrency = validateInt('concurrency', options.concurrency ?? 1, 1, 1_000);
  const budget = validateInt('advanceUpToMs', options.advanceUpToMs ?? 0, 0, 100 * 365 * 86_400_000);
  const maxSettlements = validateInt('maxSettlements', options.maxSettlements ?? 1_000, 1, 10_000_000);
  const timeoutMs = validateInt('timeoutMs', options.timeoutMs ?? 30_000, 1, 3_600_000);
  const handled = new Set(list.map((e) => e.kind.kind));
  const result = emptyResult();
  const test = new TestHost(t, {
    handlers: list,
    queues: Object.fromEntries(
      queues.map((q) => [q, { concurrency, prefetch: 0, dlq: options.dlq ?? false }]),
    ),
    shutdownTimeoutMs: Math.min(timeoutMs, 5_000),
    onStart: () => void d.activity++,
    onSettled: (s) => {
      d.activity++;
      record(result, s, handled);
    },
  });
  const d: Drain = { t, test, queues, result, activity: 0, quietAt: null };
  const deadline = Date.now() + timeoutMs;
  let gaveUp: string | null = null;
  await test.host.start();
  try {
    while (!(await idleOrAdvanced(d, budget))) {
      if (result.settled.length >= maxSettlements)
        gaveUp = `after ${maxSettlements} settlements (maxSettlements)`;
      else if (Date.now() >= deadline) gaveUp = `within ${timeoutMs} ms (timeoutMs)`;
      if (gaveUp) break;
      await sleep(ROUND_MS);
    }
  } finally {
    await test.host.stop();
  }
  result.left = await look(d);
  if (gaveUp) throw new DrainIncompleteError(incomplete(d, gaveUp), result);
  return result;
}

/** One round: promotes what is due, then says whether the queues are idle. Idle but for jobs waiting for a
 * time within the clock budget, it advances the clock to the next and says no. */
async function idleOrAdvanced(d: Drain, budget: number): Promise<boolean> {
  const before = d.activity;
  const store = ringStorage(d.t.client.schema);
  const moved = (await store.maintenance.promoteDue(d.t.client.pool, PROMOTE_LIMIT)) + (await expire(d));
  const left = await look(d);
  const busy =
    moved > 0 || left.available > 0 || left.running > 0 || left.nextDueInMs === 0 || d.test.host.inFlight > 0;
  if (busy || d.activity !== before) {
    d.quietAt = null;
    return false;
  }
  // A look is several statements, each its own snapshot, so a claim or settlement that commits while they run
  // can hide a job from every one of them. Idle holds only when the next look, a round later, agrees, and the
  // host started and settled nothing in between.
  if (d.quietAt !== before) {
    d.quietAt = before;
    return false;
  }
  const next = left.nextDueInMs;
  if (next === null || d.result.advancedMs + next > budget) return true;
  await d.t.clock.advance(next);
  d.result.advancedMs += next;
  d.quietAt = null;
  return false;
}

/** Expires the schema's parked attempts whose callback timed out (the leader's work, done here).
 * Returns how many it expired. */
async function expire(d: Drain): Promise<number> {
  const expired = await ringStorage(d.t.client.schema).maintenance.expireCallbacks(
    d.t.client.pool,
    PROMOTE_LIMIT,
  );
  for (const e of expired) {
    const job = await d.t.client.getJob(e.jobId);
    const seen = { jobId: e.jobId, kind: job?.kind ?? 'unknown', queue: job?.queue ?? 'unknown' };
    recordTimedOut(d.result, seen, e.outcome === 'retry');
  }
  return expired.length;
}

/** What the drained queues hold. Available jobs are listed, not counted: the count includes positions that
 * rolled-back producers took, until a claim passes them. */
async function look(d: Drain): Promise<DrainLeft> {
  const c = d.t.client;
  const [counts, next, ...available] = await Promise.all([
    c.counts(),
    d.t.clock.nextDueInMs(d.queues),
    ...d.queues.map((queue) => c.listJobs({ state: 'available', queue, limit: 1000 })),
  ]);
  const left = leftIn(counts, d.queues, next);
  left.available = available.reduce((n, jobs) => n + jobs.length, 0);
  return left;
}

function incomplete(d: Drain, gaveUp: string): string {
  const l = d.result.left;
  const last = d.result.settled
    .slice(-5)
    .map((s) => `  job ${s.jobId} (${s.kind}): ${s.outcome}`)
    .join('\n');
  return (
    `drainQueue: queue(s) ${d.queues.map((q) => JSON.stringify(q)).join(', ')} of test schema "${d.t.schema}" ` +
    `were not idle ${gaveUp}: ${l.available} available, ${l.running} running, ${l.scheduled} scheduled, ` +
    `${l.retryable} retryable, ${l.waiting} waiting for a callback left. The last settlements:\n${last || '  none'}` +
    d.test.errorLines()
  );
}
