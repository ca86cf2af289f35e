import { describe, expect, it } from 'vitest';
import { SettleBatcher } from '../../src/host/settle-batcher.js';
import type { Settlement } from '../../src/storage/operations.js';

const item = (n: number): Settlement => ({
  claimSlot: 0,
  batchId: '1',
  idx: n,
  jobId: String(n),
  runLease: 1,
  outcome: 'completed',
});
const tick = () => new Promise((r) => setTimeout(r, 5));

describe('SettleBatcher', () => {
  it('flushes at the batch size, keeps one flush in flight and batches what arrives meanwhile', async () => {
    const flushed: number[][] = [];
    let release!: () => void;
    let gate = new Promise<void>((r) => (release = r));
    const b = new SettleBatcher(
      {
        flush: async (items) => {
          flushed.push(items.map((i) => i.idx));
          await gate;
          return new Set(items.map((i) => i.jobId));
        },
        onFlushed: () => {},
        onError: (e) => {
          throw e;
        },
      },
      3,
      1_000,
    );
    for (let i = 1; i <= 3; i++) b.add(item(i));
    expect(flushed).toEqual([[1, 2, 3]]);
    for (let i = 4; i <= 8; i++) b.add(item(i));
    expect(flushed).toHaveLength(1); // still in flight: nothing else starts
    expect(b.backlog).toBe(5);
    const drained = b.drain();
    gate = Promise.resolve();
    release();
    await drained;
    expect(flushed).toEqual([
      [1, 2, 3],
      [4, 5, 6],
      [7, 8],
    ]);
    expect(b.backlog).toBe(0);
  });

  it('flushes a partial batch after the delay', async () => {
    const flushed: number[][] = [];
    const b = new SettleBatcher(
      {
        flush: async (items) => (flushed.push(items.map((i) => i.idx)), new Set()),
        onFlushed: () => {},
        onError: () => {},
      },
      100,
      1,
    );
    b.add(item(1));
    b.add(item(2));
    expect(flushed).toEqual([]);
    await tick();
    expect(flushed).toEqual([[1, 2]]);
  });

  it('keeps results through a failed flush and replays them, reporting the error', async () => {
    const errors: unknown[] = [];
    const accepted: string[] = [];
    let calls = 0;
    const b = new SettleBatcher(
      {
        flush: async (items) => {
          if (++calls === 1) throw new Error('connection lost');
          return new Set(items.map((i) => i.jobId));
        },
        onFlushed: (_items, ok) => accepted.push(...ok),
        onError: (e) => errors.push(e),
      },
      2,
      1,
    );
    b.add(item(1));
    b.add(item(2));
    await b.drain();
    expect(errors).toHaveLength(1);
    expect(accepted.sort()).toEqual(['1', '2']);
    expect(calls).toBe(2);
  });
});
