import type pg from 'pg';
import {
  isDataError,
  type ClaimBatch,
  type ClaimedJob,
  type Settlement,
  type SettlerStore,
} from '../storage/index.js';
import { SettleBatcher } from './settle-batcher.js';
import type { ConsumerTelemetry, HostSettlement } from '../telemetry/index.js';

// How a worker host's attempt results reach the database: each one names its attempt (receipt member and run
// lease) and what became of it, and they are flushed together through settle_attempts(). A result PostgreSQL refuses
// for its data is quarantined, not lost.

/** A result for the batcher: the attempt (receipt member, run lease) and what became of it. */
export function settlementOf(
  queue: string,
  batch: ClaimBatch,
  c: ClaimedJob,
  outcome: Settlement['outcome'],
  runAt?: Date,
  error?: Record<string, unknown>,
  result?: string,
): HostSettlement {
  return {
    queue,
    kind: c.kind,
    claimSlot: batch.claimSlot,
    batchId: batch.batchId,
    idx: c.idx,
    jobId: c.id,
    runLease: c.runLease,
    outcome,
    runAt,
    error,
    result,
  };
}

export interface SettleSink {
  pool: pg.Pool;
  store: SettlerStore;
  telemetry: ConsumerTelemetry;
  onFlushed(items: readonly HostSettlement[], accepted: Set<string>): void;
  onError(err: unknown): void;
}

/** The host's settle batcher: flushes of `size` results or after `flushMs`, one in flight. */
export function settleBatcher(
  sink: SettleSink,
  size: number,
  flushMs: number,
): SettleBatcher<HostSettlement> {
  return new SettleBatcher<HostSettlement>(
    {
      flush: async (items) => {
        const startedAt = performance.now();
        try {
          return await sink.store.settleAttempts(sink.pool, items);
        } finally {
          sink.telemetry.flushTook((performance.now() - startedAt) / 1000);
        }
      },
      onFlushed: (items, accepted) => sink.onFlushed(items, accepted),
      onError: (err) => sink.onError(err),
      isPoison: isDataError,
      // The attempt still ends as it asked (retry, fail…), only without what PostgreSQL refused: its
      // own run time (a retry then waits out the backoff rule), error details, and a completion's result.
      quarantine: (item, err) => ({
        ...item,
        runAt: undefined,
        result: undefined,
        error: {
          attempt: item.error?.attempt,
          at: new Date().toISOString(),
          name: 'SettlementRejected',
          error: `PostgreSQL refused this attempt's result (${(err as Error).message}); its error details were dropped`,
        },
      }),
    },
    size,
    flushMs,
  );
}
