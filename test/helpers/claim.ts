import { claimJobs, type ClaimBatch } from '../../src/storage/index.js';

/** The batches of one storage-level claim, for tests that do not care whether a lane was contended. */
export const claimBatches = (...args: Parameters<typeof claimJobs>): Promise<ClaimBatch[]> =>
  claimJobs(...args).then((r) => r.batches);
