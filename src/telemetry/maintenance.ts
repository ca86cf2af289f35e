import { SpanStatusCode, type Attributes, type Counter, type Histogram } from '@opentelemetry/api';
import type { CleanupResult, PruneResult, RescuedAttempt } from '../storage/index.js';
import { ATTR, DURATION_BUCKETS, METRIC } from './names.js';
import { errorType } from './producer.js';
import type { TelemetryScope } from './scope.js';

// What the maintenance leader records: per step a duration (every tick), counters of what it did, and a span
// only for a tick that did something (promotion runs every 250 ms; an idle fleet should not fill a trace
// store with empty maintenance spans). Spans are made after the fact, with the step's start time.

export type MaintenanceStep = 'promote' | 'rescue' | 'rotate' | 'prune' | 'tally' | 'cleanup' | 'cron';

export class MaintenanceTelemetry {
  private readonly duration: Histogram;
  private readonly promotedCounter: Counter;
  private readonly rescuedCounter: Counter;
  private readonly rotations: Counter;
  private readonly prunes: Counter;
  private readonly carried: Counter;
  private readonly cleaned: Counter;
  private readonly callbackTimedOut: Counter;

  constructor(private readonly scope: TelemetryScope) {
    const m = scope.meter;
    this.duration = m.createHistogram(METRIC.maintenanceDuration, {
      description: 'Duration of one maintenance step on the leader',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.promotedCounter = m.createCounter(METRIC.promoted, {
      description: 'Scheduled and retryable jobs moved into the ready ring once due',
      unit: '{job}',
    });
    this.rescuedCounter = m.createCounter(METRIC.rescued, {
      description: 'Abandoned attempts rescued (silent worker, passed deadline), by reason and outcome',
      unit: '{job}',
    });
    this.rotations = m.createCounter(METRIC.rotations, {
      description: 'Ring rotations (a new current slot)',
      unit: '{rotation}',
    });
    this.prunes = m.createCounter(METRIC.prunes, {
      description: 'Prune attempts on the oldest sealed ring slot, by outcome (pruned, or what held it)',
      unit: '{attempt}',
    });
    this.carried = m.createCounter(METRIC.carried, {
      description: 'Live rows prune carried forward out of the oldest slot',
      unit: '{row}',
    });
    this.cleaned = m.createCounter(METRIC.cleaned, {
      description: 'History rows removed by retention, by state (failed, dlq, completed)',
      unit: '{row}',
    });
    this.callbackTimedOut = m.createCounter(METRIC.callbackTimedOut, {
      description: 'External callbacks that timed out (parked jobs: by the leader; waits: in the handler)',
      unit: '{callback}',
    });
  }

  /** Marks the start of a step: pass the result to the recorder of that step. */
  start(): StepClock {
    return { atMs: Date.now(), at: performance.now() };
  }

  promoted(clock: StepClock, n: number): void {
    if (n > 0) this.promotedCounter.add(n);
    this.finish('promote', clock, n > 0, { 'awa.job.count': n });
  }

  rescued(
    clock: StepClock,
    rescued: readonly RescuedAttempt[],
    expired: readonly { outcome: string }[],
  ): void {
    for (const r of rescued)
      this.rescuedCounter.add(1, { [ATTR.rescueReason]: r.reason, [ATTR.outcome]: r.outcome });
    for (const e of expired)
      this.callbackTimedOut.add(1, { [ATTR.callbackWait]: 'parked', [ATTR.outcome]: e.outcome });
    const work = rescued.length + expired.length;
    this.finish('rescue', clock, work > 0, {
      'awa.job.count': rescued.length,
      'awa.callback.expired': expired.length,
    });
  }

  rotated(clock: StepClock, slot: number | null): void {
    if (slot !== null) this.rotations.add(1);
    this.finish('rotate', clock, slot !== null, slot === null ? {} : { [ATTR.ringSlot]: slot });
  }

  pruned(clock: StepClock, r: PruneResult): void {
    this.prunes.add(1, { [ATTR.pruneOutcome]: r.outcome });
    if (r.carried > 0) this.carried.add(r.carried);
    const attrs: Attributes = { [ATTR.pruneOutcome]: r.outcome, 'awa.ring.carried': r.carried };
    if (r.slot !== null) attrs[ATTR.ringSlot] = r.slot;
    this.finish('prune', clock, r.outcome === 'pruned' || r.outcome === 'carried', attrs);
  }

  tallied(clock: StepClock, slots: number): void {
    this.finish('tally', clock, slots > 0, { 'awa.ring.tallied': slots });
  }

  cleanedUp(clock: StepClock, r: CleanupResult): void {
    if (r.failed > 0) this.cleaned.add(r.failed, { [ATTR.state]: 'failed' });
    if (r.dlq > 0) this.cleaned.add(r.dlq, { [ATTR.state]: 'dlq' });
    if (r.completed > 0) this.cleaned.add(r.completed, { [ATTR.state]: 'completed' });
    this.finish('cleanup', clock, r.failed + r.dlq + r.completed + r.results > 0, {});
  }

  cronEvaluated(clock: StepClock, fires: number): void {
    this.finish('cron', clock, fires > 0, { 'awa.cron.fires': fires });
  }

  failed(step: MaintenanceStep, clock: StepClock, err: unknown): void {
    const type = errorType(err);
    this.duration.record((performance.now() - clock.at) / 1000, {
      [ATTR.step]: step,
      [ATTR.errorType]: type,
    });
    const span = this.scope.tracer.startSpan(`awa.${step}`, {
      startTime: clock.atMs,
      attributes: { [ATTR.step]: step, [ATTR.errorType]: type },
    });
    if (err instanceof Error) span.recordException(err);
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : type });
    span.end();
  }

  private finish(step: MaintenanceStep, clock: StepClock, didWork: boolean, attributes: Attributes): void {
    this.duration.record((performance.now() - clock.at) / 1000, { [ATTR.step]: step });
    if (!didWork) return;
    this.scope.tracer
      .startSpan(`awa.${step}`, { startTime: clock.atMs, attributes: { [ATTR.step]: step, ...attributes } })
      .end();
  }
}

export interface StepClock {
  /** Wall clock (the span's start time). */
  atMs: number;
  /** Monotonic clock (the duration). */
  at: number;
}
