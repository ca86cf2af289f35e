import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { InvalidOptionError } from './errors.js';
import { canonicalJson } from './unique.js';
import { describe, rejectUnknownKeys, validatePlainObject } from './validation.js';

// What an operator sees about a queue or a kind besides its numbers: declared in code next to it, reported by
// every host that serves it (with a hash, so admin reads can tell when hosts disagree).

export interface Description {
  /** A short human name. */
  label?: string;
  description?: string;
  /** Team or person to call. */
  owner?: string;
  /** Where its runbook or docs live. */
  docsUrl?: string;
}

const KEYS = ['label', 'description', 'owner', 'docsUrl'] as const;

export function resolveDescription(field: string, value: unknown): Description {
  if (value === undefined) return {};
  const o = validatePlainObject(field, value);
  rejectUnknownKeys(field, o, KEYS);
  const out: Description = {};
  for (const key of KEYS) {
    const v = o[key];
    if (v === undefined) continue;
    if (typeof v !== 'string' || v.length > 2_000 || !v.isWellFormed()) {
      throw new InvalidOptionError(
        `${field}.${key}`,
        `must be a string of at most 2000 characters, got ${describe(v)}`,
      );
    }
    if (key === 'docsUrl' && !/^https?:\/\//.test(v)) {
      throw new InvalidOptionError(`${field}.${key}`, `must be an http(s) URL, got ${describe(v)}`);
    }
    out[key] = v;
  }
  return out;
}

/** A descriptor's identity for drift detection: a hash of its canonical JSON. */
export function descriptorHash(descriptor: object): string {
  return createHash('sha256').update(canonicalJson(descriptor)).digest('hex').slice(0, 16);
}

/** This package's version (reported by hosts in their runtime snapshot). */
export const AWA_VERSION: string = (() => {
  for (const rel of ['../../package.json', '../../../package.json']) {
    const path = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(path)) return (JSON.parse(readFileSync(path, 'utf8')) as { version: string }).version;
  }
  return 'unknown';
})();
