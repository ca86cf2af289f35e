import { describe, expect, it } from 'vitest';
import { resolveHostConfig, resultRetentionByQueue } from '../../src/host/config.js';
import { optionError } from '../helpers/option-error.js';

// Options renamed to the glossary's word keep working under their old names; an option given under both names
// is refused rather than one silently winning.

const url = 'postgres://u@localhost/db';

describe('renamed host options', () => {
  it('settleBatchSize and settleFlushMs default to 512 and 1 ms', () => {
    expect(resolveHostConfig({ connectionString: url })).toMatchObject({
      settleBatchSize: 512,
      settleFlushMs: 1,
    });
  });

  it('the old names completionBatchSize and completionFlushMs still set them', () => {
    const c = resolveHostConfig({ connectionString: url, completionBatchSize: 64, completionFlushMs: 5 });
    expect(c).toMatchObject({ settleBatchSize: 64, settleFlushMs: 5 });
  });

  it('a bad value under the old name is reported under the name it was given', () => {
    expect(
      optionError(() => resolveHostConfig({ connectionString: url, completionBatchSize: 0 })).field,
    ).toBe('completionBatchSize');
  });

  it('both names of one option are refused, the message naming the one to keep', () => {
    const err = optionError(() =>
      resolveHostConfig({ connectionString: url, settleFlushMs: 2, completionFlushMs: 3 }),
    );
    expect(err.field).toBe('completionFlushMs');
    expect(err.message).toContain('give settleFlushMs only');
  });
});

// queues.<name>.resultRetentionMs: how long that queue's stored results are kept, validated like the other
// per-queue keys (the error names the field), and handed to the leader's cleanup as the queues that differ.
describe('per-queue result retention', () => {
  it('defaults to none of its own (completedRetentionMs applies), and is taken per queue when given', () => {
    const c = resolveHostConfig({
      connectionString: url,
      completedRetentionMs: 7_200_000,
      queues: { reports: { concurrency: 5, resultRetentionMs: 86_400_000 }, emails: 10, plain: {} },
    });
    expect(c.queues.get('reports')?.resultRetentionMs).toBe(86_400_000);
    expect(c.queues.get('emails')?.resultRetentionMs).toBeNull();
    expect(c.queues.get('plain')?.resultRetentionMs).toBeNull();
    expect([...resultRetentionByQueue(c)]).toEqual([['reports', 86_400_000]]);
  });

  it('accepts 0 (results go at the next cleanup) up to 30 days', () => {
    const c = resolveHostConfig({
      connectionString: url,
      queues: { a: { resultRetentionMs: 0 }, b: { resultRetentionMs: 30 * 86_400_000 } },
    });
    expect(resultRetentionByQueue(c)).toEqual(
      new Map([
        ['a', 0],
        ['b', 30 * 86_400_000],
      ]),
    );
  });

  it('refuses a value that is not a whole number of ms in range, naming the queue and the key', () => {
    for (const bad of [-1, 1.5, 31 * 86_400_000, '60000', null, Number.NaN]) {
      const err = optionError(() =>
        resolveHostConfig({
          connectionString: url,
          queues: { reports: { resultRetentionMs: bad as number } },
        }),
      );
      expect(err.field).toBe('queues.reports.resultRetentionMs');
    }
  });

  it('is a key of the per-queue options only: misspelt, it is refused as unknown', () => {
    const err = optionError(() =>
      resolveHostConfig({
        connectionString: url,
        queues: { reports: { resultRetentionMS: 1000 } as never },
      }),
    );
    expect(err.message).toContain('resultRetentionMS');
  });
});
