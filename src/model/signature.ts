import { createHmac, timingSafeEqual } from 'node:crypto';
import { InvalidOptionError } from './errors.js';
import { describe } from './validation.js';

// The one definition of Awa's HTTP signature (docs/callbacks.md, "Signing contract"), used by the callback
// receiver (src/http) to check callbacks and by HTTP worker targets (src/host/http-target.ts) to sign
// requests and check answers:
//
//   Awa-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<exact raw body bytes>")>[,v1=…]
//
// Several v1= entries are allowed (one per secret while secrets rotate); a message is authentic when any of
// them matches any secret the verifier holds, and its t is within the tolerance of the verifier's clock.

export const SIGNATURE_HEADER = 'Awa-Signature';
export const DEFAULT_TOLERANCE_SECONDS = 300;

/** Shortest secret accepted, in bytes (UTF-8). */
export const MIN_SECRET_BYTES = 16;
/** Most secrets one side holds at once (rotation needs two). */
const MAX_SECRETS = 8;
/** A header longer than this, or with more v1= entries, is refused unread. */
const MAX_HEADER_CHARS = 2048;
const MAX_SIGNATURES = 8;
const DIGEST_BYTES = 32;

/**
 * Checks a secret (or a list of them, for rotation) once, at configuration: each a string of at least 16
 * bytes. Returns the list.
 */
export function validateSecrets(field: string, value: unknown): readonly string[] {
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0 || list.length > MAX_SECRETS) {
    throw new InvalidOptionError(
      field,
      `must be a secret (a string) or a list of 1 to ${MAX_SECRETS} secrets, got ${describe(value)}`,
    );
  }
  for (const s of list as unknown[]) {
    if (typeof s !== 'string' || Buffer.byteLength(s) < MIN_SECRET_BYTES) {
      throw new InvalidOptionError(
        field,
        `each secret must be a string of at least ${MIN_SECRET_BYTES} bytes (use e.g. \`openssl rand -hex 32\`)`,
      );
    }
  }
  return [...(list as string[])];
}

/** Splits a secrets setting (an environment variable, say): one secret, or several separated by commas. */
export function parseSecretList(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

function digest(secret: string, timestamp: number, body: string | Uint8Array): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest();
}

/**
 * The Awa-Signature header value for `body` (the exact bytes sent), signed with each secret given (one v1= per
 * secret), at `timestamp` (unix seconds, default now).
 */
export function signatureHeader(
  secrets: string | readonly string[],
  body: string | Uint8Array,
  timestamp = Math.floor(Date.now() / 1000),
): string {
  const list = typeof secrets === 'string' ? [secrets] : secrets;
  return [`t=${timestamp}`, ...list.map((s) => `v1=${digest(s, timestamp, body).toString('hex')}`)].join(',');
}

export interface ParsedSignature {
  timestamp: number;
  signatures: Buffer[];
}

/**
 * Parses an Awa-Signature header: exactly one t= (unix seconds), one or more v1= (64 hex digits). Other keys
 * are ignored (room for later schemes); anything malformed gives null.
 */
export function parseSignatureHeader(header: string | null | undefined): ParsedSignature | null {
  if (typeof header !== 'string' || header.length === 0 || header.length > MAX_HEADER_CHARS) return null;
  let timestamp: number | null = null;
  const signatures: Buffer[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq === -1) return null;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === 't') {
      if (timestamp !== null || !/^\d{1,12}$/.test(value)) return null;
      timestamp = Number(value);
    } else if (key === 'v1') {
      if (!/^[0-9a-fA-F]{64}$/.test(value) || signatures.length >= MAX_SIGNATURES) return null;
      signatures.push(Buffer.from(value, 'hex'));
    }
  }
  if (timestamp === null || signatures.length === 0) return null;
  return { timestamp, signatures };
}

/** True when `timestamp` (unix seconds) is within ±toleranceSeconds of now. */
export function isFresh(
  timestamp: number,
  toleranceSeconds: number,
  nowSeconds = Math.floor(Date.now() / 1000),
): boolean {
  return Math.abs(nowSeconds - timestamp) <= toleranceSeconds;
}

/** True when some v1= of the header is the HMAC of `body` under some secret; compared in constant time. */
export function signatureMatches(
  parsed: ParsedSignature,
  body: string | Uint8Array,
  secrets: readonly string[],
): boolean {
  let ok = false;
  for (const secret of secrets) {
    const expected = digest(secret, parsed.timestamp, body);
    // Every pair is compared (no early exit), and each comparison is on two 32-byte buffers.
    for (const given of parsed.signatures) {
      if (given.length === DIGEST_BYTES && timingSafeEqual(given, expected)) ok = true;
    }
  }
  return ok;
}

/** The whole check: a well-formed header, a fresh timestamp, and a matching signature. */
export function verifySignature(
  header: string | null | undefined,
  body: string | Uint8Array,
  secrets: readonly string[],
  options: { toleranceSeconds?: number; nowSeconds?: number } = {},
): boolean {
  const parsed = parseSignatureHeader(header);
  return (
    parsed !== null &&
    isFresh(parsed.timestamp, options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS, options.nowSeconds) &&
    signatureMatches(parsed, body, secrets)
  );
}
