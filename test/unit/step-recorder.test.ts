import { describe, expect, it } from 'vitest';
import { StepRecorder } from '../../src/host/step-recorder.js';
import type { AttemptRef, StepRecord, StepWrite } from '../../src/storage/index.js';

// The host's step recorder without a database: records made together go in one write, each caller gets its
// own answer, and a failed write rejects every step in it.

const ref = (jobId: string): AttemptRef => ({ claimSlot: 0, batchId: '1', idx: 1, jobId, runLease: 1 });
const write = (name: string): StepWrite => ({ name, resultJson: '1', maxSteps: 10 });

describe('StepRecorder', () => {
  it('group-commits the records made within its window and answers each in order', async () => {
    const calls: string[][] = [];
    const recorder = new StepRecorder(async (items) => {
      calls.push(items.map((i) => `${i.attempt.jobId}/${i.write.name}`));
      return items.map((i): StepRecord => ({
        status: 'recorded',
        result: i.attempt.jobId,
        recordedAt: new Date(0),
      }));
    }, 5);
    const answers = await Promise.all([
      recorder.record(ref('1'), write('a')),
      recorder.record(ref('2'), write('a')),
      recorder.record(ref('3'), write('b')),
    ]);
    expect(calls).toEqual([['1/a', '2/a', '3/b']]);
    expect(answers.map((a) => ('result' in a ? a.result : null))).toEqual(['1', '2', '3']);
  });

  it('flushes at maxBatch without waiting for the window, and drain() sends what is pending', async () => {
    const sizes: number[] = [];
    const recorder = new StepRecorder(
      async (items) => {
        sizes.push(items.length);
        return items.map((): StepRecord => ({ status: 'closed' }));
      },
      60_000,
      2,
    );
    const first = [recorder.record(ref('1'), write('a')), recorder.record(ref('2'), write('a'))];
    await Promise.all(first);
    const third = recorder.record(ref('3'), write('a'));
    await recorder.drain();
    await expect(third).resolves.toEqual({ status: 'closed' });
    expect(sizes).toEqual([2, 1]);
  });

  it('a failed write rejects every step it carried', async () => {
    const recorder = new StepRecorder(() => Promise.reject(new Error('connection lost')), 1);
    const results = await Promise.allSettled([
      recorder.record(ref('1'), write('a')),
      recorder.record(ref('2'), write('a')),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
  });
});
