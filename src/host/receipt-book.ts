import type { ClaimBatch } from '../storage/index.js';

// The receipts this process holds: claim batches whose members it has not all answered for yet (settled and
// flushed, or closed elsewhere by a cancel or rescue). A receipt of this instance that is open in the
// database but absent here belongs to a claim whose answer never arrived; the host hands those back.

export class ReceiptBook {
  private readonly open = new Map<string, number>();

  add(batch: ClaimBatch): void {
    if (batch.jobs.length > 0) this.open.set(batch.batchId, batch.jobs.length);
  }

  /** One member of `batchId` is answered for. */
  answered(batchId: string): void {
    const left = (this.open.get(batchId) ?? 0) - 1;
    if (left > 0) this.open.set(batchId, left);
    else this.open.delete(batchId);
  }

  /** Batch ids with members still unanswered. */
  known(): string[] {
    return [...this.open.keys()];
  }
}
