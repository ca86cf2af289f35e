import { describe, expect, it } from 'vitest';
import { PayloadNotSerialisableError, PayloadTooLargeError } from '../../src/index.js';
import {
  DEFAULT_MAX_PAYLOAD_BYTES,
  encodeArgs,
  encodeResult,
  MAX_RESULT_BYTES,
} from '../../src/model/payload.js';

const notSerialisable = (args: unknown, reason: string | RegExp) => {
  let caught: unknown;
  try {
    encodeArgs('k', args, DEFAULT_MAX_PAYLOAD_BYTES);
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(PayloadNotSerialisableError);
  const e = caught as PayloadNotSerialisableError;
  expect(e.code).toBe('AWA_PAYLOAD_NOT_SERIALISABLE');
  expect(e.message).toContain('"k"');
  expect(e.message).toMatch(reason);
};

describe('encodeArgs', () => {
  it('round-trips plain JSON unchanged', () => {
    const values: unknown[] = [
      { to: 'a@example.com', n: 42, ok: true, none: null, list: [1, 'two', null, false, { x: -1.5 }] },
      [1, 2, 3],
      { nested: { deeper: { deepest: ['ünïcødé', '€', '😀', 'line\nbreak', 'quote"'] } } },
      {},
      [],
      'a string',
      0,
    ];
    for (const v of values) {
      const text = encodeArgs('k', v, DEFAULT_MAX_PAYLOAD_BYTES);
      expect(JSON.parse(text)).toEqual(v);
    }
  });

  it('encodes a Date through its toJSON (an ISO string)', () => {
    expect(encodeArgs('k', { at: new Date('2030-01-01T00:00:00Z') }, 1024)).toBe(
      '{"at":"2030-01-01T00:00:00.000Z"}',
    );
  });

  it('rejects a BigInt, naming the field', () => {
    notSerialisable({ amount: 10n }, /"amount" is a BigInt/);
  });

  it('rejects functions and symbols instead of dropping them', () => {
    notSerialisable({ callback: () => 1 }, /"callback" is a function/);
    notSerialisable({ tag: Symbol('t') }, /"tag" is a symbol/);
    notSerialisable(() => 1, /a function/);
  });

  it('rejects NaN and ±Infinity instead of storing null', () => {
    notSerialisable({ ratio: NaN }, /"ratio" is the number NaN/);
    notSerialisable({ big: Infinity }, /Infinity/);
    notSerialisable([1, -Infinity], /-Infinity/);
  });

  it('rejects undefined inside an array (JSON would turn it into null)', () => {
    notSerialisable([1, undefined, 3], /undefined inside an array/);
    notSerialisable({ list: ['a', undefined] }, /undefined inside an array/);
  });

  it('rejects undefined args', () => {
    notSerialisable(undefined, /args are undefined/);
  });

  it('encodes what is not plain data exactly as JSON.stringify does (the strict path), and finds a bad value at any depth', () => {
    class Point {
      constructor(
        readonly x: number,
        readonly y: number,
      ) {}
    }
    let deep: unknown = { leaf: 1 };
    for (let i = 0; i < 40; i++) deep = { next: deep, list: [i] };
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { a: 1, b: [true] });
    const values: unknown[] = [
      bare,
      { at: { toJSON: () => 'replaced' } },
      { dropped: undefined, kept: 1 },
      new Map([[1, 2]]),
      new Point(1, 2),
      deep,
    ];
    for (const v of values) expect(encodeArgs('k', v, DEFAULT_MAX_PAYLOAD_BYTES)).toBe(JSON.stringify(v));
    notSerialisable({ a: [{ b: { c: [1, { d: NaN }] } }] }, /"d" is the number NaN/);
    const holed = [0, 1, 2];
    delete holed[1];
    notSerialisable({ a: holed }, /undefined inside an array/);
    let deepBad: unknown = { fn: () => 1 };
    for (let i = 0; i < 40; i++) deepBad = { next: deepBad };
    notSerialisable(deepBad, /"fn" is a function/);
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    notSerialisable({ inner: proxy }, /revoked/);
  });

  it('random values: plain data and tolerated values encode as JSON.stringify does; one forbidden value anywhere is refused', () => {
    // A seeded generator (mulberry32), so a failure reproduces.
    let seed = 0x5eed;
    const rand = () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const forbidden = [NaN, Infinity, () => 1, Symbol('s'), 10n];
    // Not plain data, but encoded as JSON would: they take the strict path and must come out the same.
    const tolerated = () => pick([new Date(1_700_000_000_000), new Map(), { toJSON: () => 'x' }]);
    const leaf = () => pick([null, true, false, 0, -1.5, 2 ** 53, '', 'text', 'ünï "q" \\ /', '😀']);
    const value = (depth: number, bad: { left: boolean }): unknown => {
      const r = rand();
      if (depth > 0 && r < 0.3)
        return Array.from({ length: Math.floor(rand() * 4) }, () => value(depth - 1, bad));
      if (depth > 0 && r < 0.6) {
        const o: Record<string, unknown> = {};
        for (let i = Math.floor(rand() * 4); i > 0; i--) o[`k${i}`] = value(depth - 1, bad);
        return o;
      }
      if (bad.left && r > 0.93) {
        bad.left = false;
        return pick(forbidden);
      }
      return r > 0.88 ? tolerated() : leaf();
    };
    let refused = 0;
    for (let i = 0; i < 3_000; i++) {
      const wanted = rand() < 0.3;
      const bad = { left: wanted };
      const v = { root: value(1 + Math.floor(rand() * 6), bad) };
      const placed = wanted && !bad.left;
      if (!placed) {
        expect(encodeArgs('k', v, DEFAULT_MAX_PAYLOAD_BYTES)).toBe(JSON.stringify(v));
      } else {
        expect(() => encodeArgs('k', v, DEFAULT_MAX_PAYLOAD_BYTES)).toThrow(PayloadNotSerialisableError);
        refused++;
      }
    }
    // Both halves ran (a generator that never placed a forbidden value would prove nothing).
    expect(refused).toBeGreaterThan(100);
    expect(refused).toBeLessThan(2_900);
  });

  it('rejects circular structures', () => {
    const a: Record<string, unknown> = { name: 'a' };
    a.self = a;
    notSerialisable(a, /circular/i);
  });

  it('accepts a payload of exactly the limit and rejects one byte over it (ASCII)', () => {
    const args = 'a'.repeat(18); // encoded: 20 bytes with the quotes
    expect(encodeArgs('k', args, 20)).toBe(`"${args}"`);
    expect(() => encodeArgs('k', args, 19)).toThrow(PayloadTooLargeError);
  });

  it('measures multibyte text in UTF-8 bytes, not string length', () => {
    const euro = '€'.repeat(6); // 8 UTF-16 units encoded, 2 + 6 × 3 = 20 bytes
    expect(encodeArgs('k', euro, 20)).toBe(`"${euro}"`);
    let caught: unknown;
    try {
      encodeArgs('mail', euro, 19);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(PayloadTooLargeError);
    expect((caught as PayloadTooLargeError).code).toBe('AWA_PAYLOAD_TOO_LARGE');
    expect((caught as Error).message).toContain('"mail" are 20 bytes encoded; the limit is 19');

    const emoji = '😀'.repeat(4); // 2 + 4 × 4 = 18 bytes
    expect(encodeArgs('k', emoji, 18)).toBe(`"${emoji}"`);
    expect(() => encodeArgs('k', emoji, 17)).toThrow(PayloadTooLargeError);
  });

  it('rejects a large object over the default 1 MiB limit', () => {
    const big = { blob: 'x'.repeat(DEFAULT_MAX_PAYLOAD_BYTES) };
    expect(() => encodeArgs('k', big, DEFAULT_MAX_PAYLOAD_BYTES)).toThrow(PayloadTooLargeError);
  });
});

// A handler's result: stored as JSON with its completion, nothing stored for undefined or null, the rules of
// args, and its own bound (MAX_RESULT_BYTES), past which the attempt fails with PayloadTooLargeError.
describe('encodeResult', () => {
  it('encodes plain JSON, and stores nothing for undefined or null', () => {
    expect(encodeResult('k', { total: 3, ids: ['a'] })).toBe('{"total":3,"ids":["a"]}');
    expect(encodeResult('k', 'done')).toBe('"done"');
    expect(encodeResult('k', 0)).toBe('0');
    expect(encodeResult('k', false)).toBe('false');
    expect(encodeResult('k', undefined)).toBeUndefined();
    expect(encodeResult('k', null)).toBeUndefined();
  });

  it('refuses what JSON or jsonb cannot hold, saying it is the result', () => {
    for (const bad of [{ n: 10n }, { f: () => 1 }, Number.NaN, { s: 'a\u0000b' }]) {
      let caught: unknown;
      try {
        encodeResult('k', bad);
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(PayloadNotSerialisableError);
      expect((caught as Error).message).toMatch(/^Result for job kind "k"/);
    }
  });

  it('refuses a result over MAX_RESULT_BYTES (64 KiB) and takes one at the bound', () => {
    expect(MAX_RESULT_BYTES).toBe(64 * 1024);
    expect(encodeResult('k', 'x'.repeat(MAX_RESULT_BYTES - 2))).toHaveLength(MAX_RESULT_BYTES);
    let caught: unknown;
    try {
      encodeResult('k', 'x'.repeat(MAX_RESULT_BYTES - 1));
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(PayloadTooLargeError);
    expect((caught as PayloadTooLargeError).code).toBe('AWA_PAYLOAD_TOO_LARGE');
    expect((caught as Error).message).toContain(`the limit is ${MAX_RESULT_BYTES}`);
    expect((caught as Error).message).toContain('return a reference');
  });
});
