import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/index.js';
import { validateLimits, validateLimitsOverride, type QueueLimits } from '../../src/model/limits.js';
import { resolveHostConfig } from '../../src/host/config.js';

// Limits are validated once, where they are declared or set, with errors that name the field; defaults are
// filled in so what the database stores is complete.

const fieldOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (err) {
    if (err instanceof InvalidOptionError) return err.field;
    throw err;
  }
  return undefined;
};

describe('queue limits', () => {
  it('fills in a rate period of one second and a burst of the whole limit', () => {
    expect(validateLimits('l', { perKey: { rate: { limit: 100 } } })).toEqual({
      perKey: { rate: { limit: 100, periodMs: 1000, burst: 100 } },
    });
  });

  it('makes strict FIFO one at a time, and refuses another concurrency beside it', () => {
    expect(validateLimits('l', { key: { arg: 'tenant' }, perKey: { fifo: true } })).toEqual({
      key: { arg: 'tenant' },
      perKey: { fifo: true, concurrency: 1 },
    });
    expect(fieldOf(() => validateLimits('l', { perKey: { fifo: true, concurrency: 2 } }))).toBe(
      'l.perKey.concurrency',
    );
  });

  it('says nothing is limited when only a key is given', () => {
    expect(validateLimits('l', { key: { arg: 'tenant' } })).toBeNull();
  });

  it('names the bad field', () => {
    expect(fieldOf(() => validateLimits('l', { perKey: { concurrency: 0 } }))).toBe('l.perKey.concurrency');
    expect(fieldOf(() => validateLimits('l', { perKey: { rate: { limit: 10, burst: 11 } } }))).toBe(
      'l.perKey.rate.burst',
    );
    expect(fieldOf(() => validateLimits('l', { queue: { rate: { limit: 10, periodMs: 0 } } }))).toBe(
      'l.queue.rate.periodMs',
    );
    expect(fieldOf(() => validateLimits('l', { key: { arg: 'a..b' } }))).toBe('l.key.arg');
    expect(fieldOf(() => validateLimits('l', { perKey: { concurency: 3 } }))).toBe('l.perKey.concurency');
    expect(fieldOf(() => validateLimits('l', { tenant: {} }))).toBe('l.tenant');
  });

  it('takes overrides with null for a field or a section to remove', () => {
    expect(validateLimitsOverride('o', { perKey: { rate: null }, queue: null })).toEqual({
      perKey: { rate: null },
      queue: null,
    });
    expect(fieldOf(() => validateLimitsOverride('o', { perKey: { concurrency: -1 } }))).toBe(
      'o.perKey.concurrency',
    );
  });

  it('are a queue option of the worker host, which claims ahead as for any queue unless prefetch is 0', () => {
    const config = resolveHostConfig({
      connectionString: 'postgres://localhost/x',
      queues: {
        api: { concurrency: 8, limits: { perKey: { concurrency: 2 } } },
        strict: { concurrency: 8, prefetch: 0, limits: { perKey: { concurrency: 2 } } },
        plain: 8,
      },
    });
    expect(config.queues.get('api')).toMatchObject({ prefetch: 8, limits: { perKey: { concurrency: 2 } } });
    expect(config.queues.get('strict')).toMatchObject({
      prefetch: 0,
      limits: { perKey: { concurrency: 2 } },
    });
    expect(config.queues.get('plain')).toMatchObject({ prefetch: 8, limits: null });
    expect(
      fieldOf(() =>
        resolveHostConfig({
          connectionString: 'postgres://localhost/x',
          // As an untyped caller might write it.
          queues: { api: { limits: { perKey: 3 } as unknown as QueueLimits } },
        }),
      ),
    ).toBe('queues.api.limits.perKey');
  });
});
