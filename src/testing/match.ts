// Partial deep matching of what a test expects against what was stored, and the differences it found. Args
// are JSON, so the rules are JSON's: an expected object matches any object that has at least its keys, each
// matching; an expected array matches an array of the same length, element by element; anything else matches
// an equal value. Two kinds of expected value test instead of comparing: a function is a predicate, and an
// object with `asymmetricMatch` (vitest's and Jest's `expect.any(String)`, `expect.stringMatching(...)`) decides
// for itself. An expected Date matches the ISO string JSON made of it.

export interface Mismatch {
  /** Where, from the root: `args.to`, `args.items[2].sku`. */
  path: string;
  expected: unknown;
  /** Undefined when the key is missing (`missing` says so). */
  actual: unknown;
  missing: boolean;
}

interface Asymmetric {
  asymmetricMatch(actual: unknown): boolean;
}

function isAsymmetric(value: unknown): value is Asymmetric {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { asymmetricMatch?: unknown }).asymmetricMatch === 'function'
  );
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

const childPath = (path: string, key: string | number) =>
  typeof key === 'number'
    ? `${path}[${key}]`
    : /^[A-Za-z_$][\w$]*$/.test(key)
      ? `${path}.${key}`
      : `${path}[${JSON.stringify(key)}]`;

/** Every difference between `expected` (partial) and `actual`, at `path`; empty when they match. */
export function mismatches(expected: unknown, actual: unknown, path: string): Mismatch[] {
  const differ = (): Mismatch[] => [{ path, expected, actual, missing: false }];
  if (typeof expected === 'function') return (expected as (v: unknown) => unknown)(actual) ? [] : differ();
  if (isAsymmetric(expected)) return expected.asymmetricMatch(actual) ? [] : differ();
  if (expected instanceof Date) return dateMatches(expected, actual) ? [] : differ();
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) return differ();
    return expected.flatMap((e, i) => mismatches(e, actual[i], childPath(path, i)));
  }
  if (isPlainObject(expected)) {
    if (typeof actual !== 'object' || actual === null || Array.isArray(actual)) return differ();
    const have = actual as Record<string, unknown>;
    return Object.keys(expected).flatMap((key) =>
      key in have
        ? mismatches(expected[key], have[key], childPath(path, key))
        : [{ path: childPath(path, key), expected: expected[key], actual: undefined, missing: true }],
    );
  }
  return Object.is(expected, actual) || (expected === 0 && actual === 0) ? [] : differ();
}

function dateMatches(expected: Date, actual: unknown): boolean {
  if (actual instanceof Date) return actual.getTime() === expected.getTime();
  return typeof actual === 'string' && Date.parse(actual) === expected.getTime();
}
