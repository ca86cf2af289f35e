import type { SpanContext } from '@opentelemetry/api';
import type pg from 'pg';
import { isConnectionLoss, type ClaimBatch, type ClaimerStore, type ClaimResult } from '../storage/index.js';
import type { ConsumerTelemetry } from '../telemetry/index.js';
import type { Liveness } from './liveness.js';
import type { ReceiptBook } from './receipt-book.js';
import type { HostStats } from './stats.js';
import type { WakeupChannel } from './wakeup.js';

// The claimer takes a batch of a queue's jobs for its dispatcher: it tells liveness first (so a claim whose
// answer is lost is rescued promptly), claims on the wake-up connection when that is free, and books each
// batch's receipts before any of its jobs starts.

export interface ClaimerConfig {
  store: ClaimerStore;
  instanceId: string;
  priorityAgingSeconds: number;
  /** Each queue's attempt deadline, whole seconds (the claim records it on the receipt). */
  deadlineSeconds(queue: string): number;
}

export class Claimer {
  /** The receive span of each claim batch that recorded one, for its attempts' spans to link to. */
  private readonly spans = new WeakMap<ClaimBatch, SpanContext>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly cfg: ClaimerConfig,
    private readonly parts: {
      liveness: Liveness;
      wakeup: WakeupChannel;
      receipts: ReceiptBook;
      stats: HostStats;
      telemetry: ConsumerTelemetry;
    },
  ) {}

  async claim(queue: string, max: number): Promise<ClaimResult> {
    const { liveness, wakeup, receipts, stats, telemetry } = this.parts;
    await liveness.beforeClaim(queue);
    const startedAtMs = Date.now();
    const startedAt = performance.now();
    let result: ClaimResult;
    // On the wake-up connection when it is free: that is where the notification behind a pickup came from.
    const lent = wakeup.lend();
    let failure: unknown;
    try {
      result = await this.cfg.store.claim(lent?.client ?? this.pool, {
        queue,
        max,
        instanceId: this.cfg.instanceId,
        agingSeconds: this.cfg.priorityAgingSeconds,
        deadlineSeconds: this.cfg.deadlineSeconds(queue),
      });
    } catch (err) {
      // The connection went away mid-claim: the claim may have committed with its answer lost.
      if (isConnectionLoss(err)) liveness.claimLost(queue);
      telemetry.claimFailed(queue, startedAt, err);
      failure = err;
      throw err;
    } finally {
      lent?.release(failure);
    }
    stats.claimCalls++;
    stats.claimMs += performance.now() - startedAt;
    for (const b of result.batches) {
      receipts.add(b);
      stats.claimed += b.jobs.length;
    }
    const span = telemetry.claimed(queue, result, startedAtMs, startedAt);
    if (span) for (const b of result.batches) this.spans.set(b, span);
    return result;
  }

  /** The receive span of the claim that took `batch`, when it recorded one. */
  spanOf(batch: ClaimBatch): SpanContext | null {
    return this.spans.get(batch) ?? null;
  }
}
