import type { BatchObservableCallback, Observable } from '@opentelemetry/api';
import type { QueueHealth } from '../storage/index.js';
import { CachedRead } from './cached-read.js';
import { ATTR, METRIC } from './names.js';
import type { TelemetryScope } from './scope.js';

// The host's observable instruments: its own health (in-flight, held jobs and capacity per queue, completion
// backlog, leadership), read from memory, and queue health (depth per state, oldest available job's age,
// paused) read from the database. The callbacks run only when an SDK collects. Queue health is fleet-wide,
// so only the maintenance leader reports it (one series per queue across the fleet, not one per host), from
// a read cached for QUEUE_HEALTH_MAX_AGE_MS.

export interface GaugeSources {
  /** Per served queue: jobs running now, the queue's concurrency in this process, and jobs held for a permit. */
  queues(): Iterable<{ queue: string; running: number; capacity: number; held: number }>;
  backlog(): number;
  isLeader(): boolean;
  queueHealth(): Promise<QueueHealth[]>;
}

export const QUEUE_HEALTH_MAX_AGE_MS = 5_000;

const STATES = ['available', 'running', 'waiting', 'scheduled', 'retryable'] as const;

export class HostGauges {
  private readonly callback: BatchObservableCallback;
  private readonly observables: Observable[];
  private readonly health: CachedRead<QueueHealth[]>;

  constructor(
    private readonly scope: TelemetryScope,
    sources: GaugeSources,
    onError: (err: unknown) => void,
  ) {
    const m = scope.meter;
    this.health = new CachedRead(() => sources.queueHealth(), QUEUE_HEALTH_MAX_AGE_MS, [], onError);
    const inFlight = m.createObservableUpDownCounter(METRIC.inFlight, {
      description: 'Jobs running in this process now',
      unit: '{job}',
    });
    const capacity = m.createObservableUpDownCounter(METRIC.capacity, {
      description: 'Concurrency permits of this process per queue (running + free)',
      unit: '{job}',
    });
    const held = m.createObservableUpDownCounter(METRIC.held, {
      description:
        'Jobs claimed ahead of a permit, waiting in this process to start (running in the database)',
      unit: '{job}',
    });
    const backlog = m.createObservableGauge(METRIC.backlog, {
      description: 'Attempt results waiting to be flushed in this process',
      unit: '{job}',
    });
    const leader = m.createObservableGauge(METRIC.leader, {
      description: '1 while this process is the maintenance leader',
    });
    const depth = m.createObservableGauge(METRIC.depth, {
      description: 'Jobs per queue and state (reported by the maintenance leader)',
      unit: '{job}',
    });
    const oldest = m.createObservableGauge(METRIC.oldestAge, {
      description: 'Age of the oldest available job per queue, 0 when none (reported by the leader)',
      unit: 's',
    });
    const paused = m.createObservableGauge(METRIC.paused, {
      description: '1 while the queue is paused (reported by the maintenance leader)',
    });
    this.observables = [inFlight, capacity, held, backlog, leader, depth, oldest, paused];
    this.callback = async (result) => {
      for (const q of sources.queues()) {
        const attrs = { [ATTR.queue]: q.queue };
        result.observe(inFlight, q.running, attrs);
        result.observe(capacity, q.capacity, attrs);
        result.observe(held, q.held, attrs);
      }
      result.observe(backlog, sources.backlog());
      const isLeader = sources.isLeader();
      result.observe(leader, isLeader ? 1 : 0);
      if (!isLeader) return;
      const now = Date.now();
      for (const h of await this.health.get()) {
        for (const state of STATES)
          result.observe(depth, h[state], { [ATTR.queue]: h.queue, [ATTR.state]: state });
        const age = h.oldestAvailableAt ? Math.max(0, (now - h.oldestAvailableAt.getTime()) / 1000) : 0;
        result.observe(oldest, age, { [ATTR.queue]: h.queue });
        result.observe(paused, h.paused ? 1 : 0, { [ATTR.queue]: h.queue });
      }
    };
    m.addBatchObservableCallback(this.callback, this.observables);
  }

  /** Stops observing (a stopped host must not keep reporting, nor be kept alive by the SDK). */
  stop(): void {
    this.scope.meter.removeBatchObservableCallback(this.callback, this.observables);
  }
}
