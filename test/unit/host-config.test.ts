import { describe, expect, it } from 'vitest';
import { resolveHostConfig } from '../../src/host/config.js';
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
