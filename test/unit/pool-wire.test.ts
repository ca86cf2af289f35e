import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { CancelJob, FailJob, RetryAfter, Snooze } from '../../src/index.js';
import { MAX_DELAY_MS } from '../../src/model/outcomes.js';
import {
  checkThreadMessage,
  InvalidOutcomeError,
  outcomeFromWire,
  readOutcomes,
  toWireError,
  type JobOutcome,
} from '../../src/threads/protocol.js';

// The wire between pool threads and the coordinator, checked at the coordinator's door. Whatever
// arrives, these functions return: a known outcome, or a failure naming what was wrong. The threads'
// side (toWireError) never throws either, whatever a handler threw. Integration: pool-execution.test.ts.

const packr = new Packr({ useRecords: false });

function failure(o: JobOutcome): Error {
  expect(o.failed).toBe(true);
  return (o as { error: Error }).error;
}

function invalid(raw: unknown): string {
  const err = failure(outcomeFromWire(raw));
  expect(err).toBeInstanceOf(InvalidOutcomeError);
  return err.message;
}

describe('outcomeFromWire', () => {
  it('rebuilds valid outcomes as the same outcome class', () => {
    expect(outcomeFromWire(null)).toEqual({ failed: false });
    const retry = failure(
      outcomeFromWire({ type: 'RetryAfter', name: 'RetryAfter', message: 'later', delayMs: 0, stack: 'S' }),
    );
    expect(retry).toBeInstanceOf(RetryAfter);
    expect(retry).toMatchObject({ delayMs: 0, message: 'later', stack: 'S' });
    const snooze = failure(
      outcomeFromWire({ type: 'Snooze', name: 'Snooze', message: 'm', delayMs: MAX_DELAY_MS }),
    );
    expect(snooze).toBeInstanceOf(Snooze);
    expect((snooze as Snooze).delayMs).toBe(MAX_DELAY_MS);
    expect(failure(outcomeFromWire({ type: 'CancelJob', name: 'CancelJob', message: 'no' }))).toBeInstanceOf(
      CancelJob,
    );
    expect(failure(outcomeFromWire({ type: 'FailJob', name: 'FailJob', message: 'no' }))).toBeInstanceOf(
      FailJob,
    );
    const plain = failure(outcomeFromWire({ type: 'Error', name: 'TypeError', message: 'bad input' }));
    expect([plain.constructor, plain.name, plain.message]).toEqual([Error, 'TypeError', 'bad input']);
  });

  it('fails the attempt, naming the delay, for a RetryAfter or Snooze whose delay is not 0 to MAX_DELAY_MS', () => {
    const delays: [unknown, string][] = [
      [-1, '-1'],
      [-5, '-5'],
      [MAX_DELAY_MS + 1, String(MAX_DELAY_MS + 1)],
      [Infinity, 'Infinity'],
      [NaN, 'NaN'],
      [undefined, 'undefined'],
      [null, 'null'],
      // A string is the thread's description of a non-number delay, shown as it came.
      ['"5000" (a string)', '"5000" (a string)'],
    ];
    for (const type of ['RetryAfter', 'Snooze']) {
      for (const [delayMs, shown] of delays) {
        expect(invalid({ type, name: type, message: 'why', delayMs })).toBe(
          `the handler threw a ${type} with delayMs ${shown}, which is not a number of milliseconds from 0 to ${MAX_DELAY_MS} (a year); ` +
            `the attempt failed instead. The ${type}'s message: "why"`,
        );
      }
    }
  });

  it('fails the attempt, naming what arrived, for anything that is not an outcome', () => {
    expect(invalid(42)).toBe("the pool thread sent 42 as this job's outcome, not null or an error object");
    expect(invalid('boom')).toBe(
      `the pool thread sent "boom" (a string) as this job's outcome, not null or an error object`,
    );
    expect(invalid(undefined)).toContain('sent undefined as');
    expect(invalid([1, 2])).toContain('sent [1,2] as');
    expect(invalid({ type: 'Teleport', name: 'x', message: 'y' })).toBe(
      'the pool thread sent an outcome of unknown type "Teleport" (a string)',
    );
    expect(invalid({ name: 'x', message: 'y' })).toBe(
      'the pool thread sent an outcome of unknown type undefined',
    );
    expect(invalid({ type: 'Error', name: 7, message: 'y' })).toBe(
      'the pool thread sent a Error outcome whose name or message is not a string (name 7, message "y" (a string))',
    );
  });
});

describe('readOutcomes', () => {
  it('reads each entry that names a job of the batch; reports the rest', () => {
    const bytes = packr.pack([
      [0, null],
      [2, { type: 'FailJob', name: 'FailJob', message: 'x' }],
      [3, null],
      [-1, null],
      [1.5, null],
      ['0', null],
      [1],
      'junk',
    ]);
    const { outcomes, problems } = readOutcomes(new Uint8Array(bytes), 3);
    expect(outcomes.map(([i, o]) => [i, o.failed])).toEqual([
      [0, false],
      [2, true],
    ]);
    expect(problems).toEqual(
      ['[3,null]', '[-1,null]', '[1.5,null]', '["0",null]', '[1]', '"junk" (a string)'].map(
        (e) => `an outcome entry names no job of the batch: ${e}`,
      ),
    );
  });

  it('reports bytes that are not bytes, not msgpack, or not a list', () => {
    expect(readOutcomes('garbage', 1)).toEqual({
      outcomes: [],
      problems: ['outcomes arrived as "garbage" (a string), not as bytes'],
    });
    expect(readOutcomes(undefined, 1).problems).toEqual(['outcomes arrived as undefined, not as bytes']);
    expect(readOutcomes(new Uint8Array([0x92, 0x01]), 1).problems[0]).toMatch(
      /^outcomes could not be decoded: /,
    );
    expect(readOutcomes(new Uint8Array(packr.pack({ a: 1 })), 1).problems).toEqual([
      'outcomes decoded to {"a":1}, not a list',
    ]);
  });
});

describe('checkThreadMessage', () => {
  it('passes protocol messages and names what is wrong with the rest', () => {
    expect(checkThreadMessage({ t: 'start' })).toEqual({ t: 'start' });
    expect(checkThreadMessage({ t: 'log', i: 1, line: 'hi' })).toEqual({ t: 'log', i: 1, line: 'hi' });
    expect(checkThreadMessage({ t: 'progress', i: 0, v: { pct: 5 } })).toEqual({
      t: 'progress',
      i: 0,
      v: { pct: 5 },
    });
    expect(checkThreadMessage(42)).toEqual({ t: 'invalid', problem: 'a message that is 42, not an object' });
    expect(checkThreadMessage(null)).toEqual({
      t: 'invalid',
      problem: 'a message that is null, not an object',
    });
    expect(checkThreadMessage({ t: 'teleport' })).toEqual({
      t: 'invalid',
      problem: 'a message of unknown kind "teleport" (a string)',
    });
    expect(checkThreadMessage({ t: 'log', i: 0, line: 5 })).toMatchObject({ t: 'invalid' });
    expect(checkThreadMessage({ t: 'progress', i: -1 })).toMatchObject({ t: 'invalid' });
  });
});

describe('toWireError then outcomeFromWire', () => {
  const roundTrip = (thrown: unknown) => outcomeFromWire(toWireError(thrown));

  it('never throws, whatever a handler threw', () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    expect(failure(roundTrip(proxy)).message).toMatch(/^the handler threw a value that could not be read: /);
    // The same name as an inline handler's unreadable throw (src/host/outcome.ts).
    expect(failure(roundTrip(proxy)).name).toBe('UnreadableThrow');
    const getter = {
      get name(): string {
        throw new Error('no name for you');
      },
      message: 'm',
    };
    expect(failure(roundTrip(getter)).message).toBe(
      'the handler threw a value that could not be read: no name for you',
    );
    expect(failure(roundTrip(42)).message).toBe('non-Error thrown: 42');
  });

  it('keeps valid RetryAfter and Snooze delays and names invalid ones, lookalikes included', () => {
    expect((failure(roundTrip(new RetryAfter(1_234, 'later'))) as RetryAfter).delayMs).toBe(1_234);
    expect(failure(roundTrip({ name: 'Snooze', message: 'm', delayMs: 5 }))).toBeInstanceOf(Snooze);
    const tampered = new RetryAfter(1_000, 'ten years');
    Object.defineProperty(tampered, 'delayMs', { value: 10 * 365 * 86_400_000 });
    expect(failure(roundTrip(tampered)).message).toContain('a RetryAfter with delayMs 315360000000,');
    expect(failure(roundTrip({ name: 'Snooze', message: 'm', delayMs: '5000' })).message).toContain(
      'a Snooze with delayMs "5000" (a string),',
    );
    expect(failure(roundTrip({ name: 'RetryAfter', message: 'm', delayMs: { ms: 5 } })).message).toContain(
      'a RetryAfter with delayMs {"ms":5},',
    );
    expect(failure(roundTrip({ name: 'RetryAfter', message: 'm' })).message).toContain(
      'a RetryAfter with delayMs undefined,',
    );
  });
});
