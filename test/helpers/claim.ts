import type {
  ClaimBatch,
  ClaimedJob,
  ClaimerStore,
  Outcome,
  Settlement,
  Storage,
} from '../../src/storage/operations.js';

/** The batches of one claim through `storage`'s contract, for tests that do not care whether a lane was
 * contended. */
export const claimBatches = (
  storage: Storage,
  ...args: Parameters<ClaimerStore['claim']>
): Promise<ClaimBatch[]> => storage.claimer.claim(...args).then((r) => r.batches);

/** The settlement of one claimed job, as the settle batcher would hand it to settleAttempts(). */
export const settle = (
  b: ClaimBatch,
  j: ClaimedJob,
  outcome: Outcome,
  extra: Partial<Settlement> = {},
): Settlement => ({
  claimSlot: b.claimSlot,
  batchId: b.batchId,
  idx: j.idx,
  jobId: j.id,
  runLease: j.runLease,
  outcome,
  ...extra,
});

/** One settlement per job of the batches, all with the same outcome. */
export const settleAll = (
  batches: readonly ClaimBatch[],
  outcome: Outcome,
  extra: Partial<Settlement> = {},
): Settlement[] => batches.flatMap((b) => b.jobs.map((j) => settle(b, j, outcome, extra)));

/** A claim batch of `n` made-up jobs with ids from `start`, for tests that drive a dispatcher without storage. */
export const fakeBatch = (n: number, start: number): ClaimBatch => ({
  batchId: String(start),
  claimSlot: 0,
  jobs: Array.from({ length: n }, (_, i) => ({
    idx: i + 1,
    id: String(start + i),
    kind: 'k',
    args: {},
    attempt: 1,
    maxAttempts: 1,
    runLease: 1,
    priority: 2,
    enqueuedAtMs: 0,
    readyAtMs: 0,
    meta: null,
  })),
});
