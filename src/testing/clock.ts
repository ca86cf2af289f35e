import type pg from 'pg';
import { validateInt, validateName } from '../model/validation.js';
import type { Schema } from '../storage/index.js';
import { nextDueInMs, shiftDueTimes } from '../storage/testing.js';

// A test's clock for one test schema. Time in the queue is PostgreSQL's now(): a scheduled job, a retry's
// backoff, a snooze and a parked job's callback timeout are each a row with a due time. Rather than fake the
// server's clock, advancing this one moves those rows' due times earlier by the same amount, which is the same
// thing for every row that exists when it is called: what would have fallen due within `ms` is due now, and a
// job due in an hour is due in an hour less. Rows written afterwards count from the real time again.
// It moves rows, not timers: a handler's own setTimeout, ctx.waitForCallback()'s timeout (which runs in the
// handler's process) and cron schedules keep real time.

const MAX_ADVANCE_MS = 100 * 365 * 86_400_000;

export class TestClock {
  private advanced = 0;

  /** `pool`: the test schema's client's, so the clock lives as long as that client. */
  constructor(
    private readonly pool: pg.Pool,
    private readonly schema: Schema,
  ) {}

  /** How far this clock has been advanced in total, in milliseconds. */
  get advancedMs(): number {
    return this.advanced;
  }

  /** Moves time forward `ms` for the schema's deferred jobs (scheduled, snoozed, retry backoff) and parked
   * jobs' callback timeouts. A worker or drainQueue() then promotes what fell due. Returns how many rows moved. */
  async advance(ms: number): Promise<{ deferred: number; timeouts: number }> {
    validateInt('ms', ms, 0, MAX_ADVANCE_MS);
    const moved = await shiftDueTimes(this.pool, this.schema, ms);
    this.advanced += ms;
    return moved;
  }

  /** Milliseconds until the next deferred job or callback timeout (of `queues`, or all) falls due: 0 when one is
   * due now, null when nothing waits for a time. */
  async nextDueInMs(queues?: readonly string[]): Promise<number | null> {
    const names = queues === undefined ? null : queues.map((q, i) => validateName(`queues[${i}]`, q));
    return nextDueInMs(this.pool, this.schema, names);
  }

  /** Advances to the next due time (of `queues`, or all), if there is one no further away than `atMostMs`.
   * Returns how far it moved: 0 when something is due already, null when nothing waits (or it is too far). */
  async advanceToNextDue(
    options: { queues?: readonly string[]; atMostMs?: number } = {},
  ): Promise<number | null> {
    const limit =
      options.atMostMs === undefined
        ? MAX_ADVANCE_MS
        : validateInt('atMostMs', options.atMostMs, 0, MAX_ADVANCE_MS);
    const next = await this.nextDueInMs(options.queues);
    if (next === null || next > limit) return null;
    if (next > 0) await this.advance(next);
    return next;
  }
}
