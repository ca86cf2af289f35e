import { describe, expect, it } from 'vitest';
import { CancelJob, FailJob, RetryAfter, Snooze } from '../../src/index.js';
import { decide, errorRecord, MAX_ERROR_CHARS } from '../../src/host/outcome.js';
import { errorType } from '../../src/telemetry/producer.js';

const NOW = Date.parse('2030-01-02T03:04:05.678Z');
const AT = '2030-01-02T03:04:05.678Z';

describe('decide', () => {
  it('completes a handler that did not fail, whatever the attempt', () => {
    expect(decide(undefined, false, 1, 25, NOW)).toEqual({ outcome: 'completed' });
    expect(decide(undefined, false, 25, 25, NOW)).toEqual({ outcome: 'completed' });
    // A value "thrown" without failing (a resolved promise's value) is not an error.
    expect(decide(new Error('ignored'), false, 1, 1, NOW)).toEqual({ outcome: 'completed' });
  });

  it('retries a thrown Error under the backoff rule (applied by the database), recording the error', () => {
    for (const attempt of [1, 2, 5]) {
      const d = decide(new TypeError('boom'), true, attempt, 25, NOW);
      expect(d.outcome).toBe('retry');
      // No run time of its own: settle_attempts() applies backoff() (sql/functions/core/common.sql), tested there.
      expect(d.runAt).toBeUndefined();
      expect(d.error).toMatchObject({ attempt, at: AT, error: 'boom', name: 'TypeError' });
      expect(d.error!.stack).toContain('TypeError: boom');
    }
  });

  it('retries after exactly the delay a RetryAfter asks for', () => {
    const d = decide(new RetryAfter(1_234, 'rate limited'), true, 1, 3, NOW);
    expect(d).toMatchObject({
      outcome: 'retry',
      runAt: new Date(NOW + 1_234),
      error: { attempt: 1, error: 'rate limited', name: 'RetryAfter' },
    });
  });

  it('bounds RetryAfter by maxAttempts: the last attempt fails', () => {
    expect(decide(new RetryAfter(10), true, 2, 3, NOW).outcome).toBe('retry');
    const last = decide(new RetryAfter(10), true, 3, 3, NOW);
    expect(last.outcome).toBe('failed');
    expect(last.runAt).toBeUndefined();
    expect(last.error).toMatchObject({ attempt: 3, name: 'RetryAfter' });
  });

  it('snoozes without an error record, even on the last attempt (a snooze spends no attempt)', () => {
    expect(decide(new Snooze(500), true, 1, 5, NOW)).toEqual({
      outcome: 'snooze',
      runAt: new Date(NOW + 500),
    });
    expect(decide(new Snooze(0), true, 5, 5, NOW)).toEqual({ outcome: 'snooze', runAt: new Date(NOW) });
  });

  it('cancels on CancelJob, with attempts left', () => {
    const d = decide(new CancelJob('customer left'), true, 1, 25, NOW);
    expect(d).toMatchObject({ outcome: 'cancelled', error: { attempt: 1, error: 'customer left' } });
    expect(d.runAt).toBeUndefined();
  });

  it('fails for good on FailJob, with attempts left', () => {
    const d = decide(new FailJob('invalid address'), true, 1, 25, NOW);
    expect(d).toMatchObject({
      outcome: 'failed',
      error: { attempt: 1, error: 'invalid address', name: 'FailJob' },
    });
  });

  it('fails once attempts are exhausted (attempt ≥ maxAttempts)', () => {
    expect(decide(new Error('x'), true, 2, 3, NOW).outcome).toBe('retry');
    expect(decide(new Error('x'), true, 3, 3, NOW)).toMatchObject({
      outcome: 'failed',
      error: { attempt: 3 },
    });
    expect(decide(new Error('x'), true, 1, 1, NOW).outcome).toBe('failed');
  });

  it('records non-Error throws readably and still retries them', () => {
    const str = decide('a bare string', true, 1, 3, NOW);
    expect(str.outcome).toBe('retry');
    expect(str.error).toEqual({
      attempt: 1,
      at: AT,
      error: 'non-Error thrown: a bare string',
      name: 'string',
    });

    const obj = decide({ code: 42, why: 'plain object' }, true, 3, 3, NOW);
    expect(obj.outcome).toBe('failed');
    expect(obj.error).toEqual({
      attempt: 3,
      at: AT,
      error: 'non-Error thrown: {"code":42,"why":"plain object"}',
      name: 'object',
    });

    expect(decide(undefined, true, 1, 3, NOW)).toMatchObject({
      outcome: 'retry',
      error: { error: 'non-Error thrown: undefined', name: 'undefined' },
    });
    expect(decide(null, true, 1, 3, NOW).error).toMatchObject({ error: 'non-Error thrown: null' });
    expect(decide(7, true, 1, 3, NOW).error).toMatchObject({ error: 'non-Error thrown: 7', name: 'number' });
  });
});

describe('decide on a value that cannot be read', () => {
  const revoked = () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    return proxy;
  };
  const getter = () => {
    const e = new Error('hidden');
    Object.defineProperty(e, 'stack', {
      get() {
        throw new Error('stack getter exploded');
      },
    });
    return e;
  };

  it('never throws: the attempt fails as an UnreadableThrow that says what reading it threw, under the retry rule', () => {
    for (const thrown of [revoked(), getter()]) {
      expect(decide(thrown, true, 1, 3, NOW)).toEqual({
        outcome: 'retry',
        error: expect.objectContaining({
          attempt: 1,
          at: AT,
          name: 'UnreadableThrow',
          error: expect.stringMatching(/^the handler threw a value that could not be read: ./),
        }),
      });
      expect(decide(thrown, true, 3, 3, NOW).outcome).toBe('failed');
    }
    expect(decide(getter(), true, 1, 3, NOW).error!.error).toBe(
      'the handler threw a value that could not be read: stack getter exploded',
    );
  });

  it('errorType (telemetry) names it without reading it', () => {
    expect(errorType(revoked())).toBe('UnreadableThrow');
    expect(errorType(getter())).toBe('Error');
  });
});

describe('errorRecord', () => {
  it('survives values JSON cannot encode', () => {
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(errorRecord(circular, 1, NOW)).toEqual({
      attempt: 1,
      at: AT,
      error: 'non-Error thrown: [object Object]',
      name: 'object',
    });
    expect(errorRecord(10n, 2, NOW)).toMatchObject({ error: 'non-Error thrown: 10', name: 'bigint' });
  });

  it('clips a huge message and huge stack lines, saying how much was cut', () => {
    const err = new Error('x'.repeat(MAX_ERROR_CHARS + 10));
    const r = errorRecord(err, 1, NOW);
    expect(r.error).toBe(`${'x'.repeat(MAX_ERROR_CHARS)}… (10 more characters)`);
    // The stack's first line repeats the message: clipped too.
    expect((r.stack as string).split('\n')[0]!.length).toBeLessThan(600);
    expect(errorRecord('y'.repeat(MAX_ERROR_CHARS * 2), 1, NOW).error).toMatch(
      /^non-Error thrown: y+… \(\d+ more characters\)$/,
    );
    expect((errorRecord('y'.repeat(MAX_ERROR_CHARS * 2), 1, NOW).error as string).length).toBeLessThan(
      MAX_ERROR_CHARS + 40,
    );
  });

  it('keeps at most 8 stack lines', () => {
    const err = new Error('deep');
    err.stack = ['Error: deep', ...Array.from({ length: 20 }, (_, i) => `    at f${i}`)].join('\n');
    expect(errorRecord(err, 1, NOW).stack!.toString().split('\n')).toHaveLength(8);
  });
});
