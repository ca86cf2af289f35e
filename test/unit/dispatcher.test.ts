import { describe, expect, it } from 'vitest';
import { Dispatcher } from '../../src/runtime/dispatcher.js';
import type { ClaimBatch } from '../../src/storage/index.js';

const batchOf = (n: number, start: number): ClaimBatch => ({
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

describe('Dispatcher', () => {
  it('claims only as many jobs as it has free permits, and claims again while batches come back full', async () => {
    let available = 25;
    const asks: number[] = [];
    const running: string[] = [];
    const d = new Dispatcher('q', 10, 4, 60_000, {
      claim: async (_q, max) => {
        asks.push(max);
        const n = Math.min(max, available);
        available -= n;
        return n > 0 ? [batchOf(n, 100 - available)] : [];
      },
      execute: (_q, _b, job) => running.push(job.id),
      backpressure: () => false,
      onError: (e) => {
        throw e;
      },
    });
    d.start();
    await new Promise((r) => setTimeout(r, 10));
    // 10 permits, batches of 4: 4 + 4 + 2, then no permit left, so no further claim.
    expect(asks).toEqual([4, 4, 2]);
    expect(d.running).toBe(10);
    // Freed permits wake the claim loop; it never asks for more than it has free.
    for (let i = 0; i < 10; i++) d.release();
    await new Promise((r) => setTimeout(r, 10));
    expect(asks.slice(3).reduce((a, b) => a + b, 0)).toBe(10);
    expect(asks.every((n) => n <= 4)).toBe(true);
    expect(running).toHaveLength(20);
    expect(d.running).toBe(10);
    d.stopClaiming();
  });

  it('backs off after a failed claim and reports the error', async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const d = new Dispatcher('q', 5, 5, 60_000, {
      claim: async () => {
        calls++;
        throw new Error('db down');
      },
      execute: () => {},
      backpressure: () => false,
      onError: (e) => errors.push(e),
    });
    d.start();
    await new Promise((r) => setTimeout(r, 20));
    d.wake(); // ignored while backing off
    await new Promise((r) => setTimeout(r, 20));
    expect(calls).toBe(1);
    expect(errors).toHaveLength(1);
    expect(d.running).toBe(0);
    d.stopClaiming();
  });
});
