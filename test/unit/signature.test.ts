import { describe, expect, it } from 'vitest';
import { InvalidOptionError, signatureHeader, verifySignature } from '../../src/index.js';
import { readLimited } from '../../src/model/limited-body.js';
import { parseSecretList, parseSignatureHeader, validateSecrets } from '../../src/model/signature.js';

// The signing contract of docs/callbacks.md, checked against the worked example printed there (computed with
// openssl), so the docs and the code cannot drift apart.

const SECRET = 'example-secret-0123456789abcdef';
const T = 1767225600;
const BODY =
  '{"token":"0b3c6a3e-5f7d-4c1e-9a8b-2d4f6e8a1c3b","action":"complete","payload":{"receipt":"r-42"}}';
const V1 = 'b8d618511f8a556e13bb70342f85f248ff28f05be37cb4561951f6db55f632bf';

describe('Awa-Signature', () => {
  it('signs "<t>.<body>" with HMAC-SHA256 as the docs example shows', () => {
    expect(signatureHeader(SECRET, BODY, T)).toBe(`t=${T},v1=${V1}`);
    // Bytes and strings sign the same.
    expect(signatureHeader(SECRET, Buffer.from(BODY), T)).toBe(`t=${T},v1=${V1}`);
  });

  it('verifies within the tolerance only', () => {
    const header = `t=${T},v1=${V1}`;
    expect(verifySignature(header, BODY, [SECRET], { nowSeconds: T })).toBe(true);
    expect(verifySignature(header, BODY, [SECRET], { nowSeconds: T + 300 })).toBe(true);
    expect(verifySignature(header, BODY, [SECRET], { nowSeconds: T - 300 })).toBe(true);
    expect(verifySignature(header, BODY, [SECRET], { nowSeconds: T + 301 })).toBe(false);
    expect(verifySignature(header, BODY, [SECRET], { nowSeconds: T - 301 })).toBe(false);
    expect(verifySignature(header, BODY, [SECRET], { nowSeconds: T + 10, toleranceSeconds: 5 })).toBe(false);
  });

  it('refuses another body, another secret, another timestamp', () => {
    const now = { nowSeconds: T };
    expect(verifySignature(`t=${T},v1=${V1}`, `${BODY} `, [SECRET], now)).toBe(false);
    expect(verifySignature(`t=${T},v1=${V1}`, BODY, ['another-secret-0123456789abcdef'], now)).toBe(false);
    expect(verifySignature(`t=${T + 1},v1=${V1}`, BODY, [SECRET], { nowSeconds: T + 1 })).toBe(false);
  });

  it('accepts any configured secret and any of several v1= (rotation)', () => {
    const old = 'old-secret-0123456789abcdefghij';
    const both = signatureHeader([old, SECRET], BODY, T);
    expect(both.split(',')).toHaveLength(3);
    expect(verifySignature(both, BODY, [SECRET], { nowSeconds: T })).toBe(true);
    expect(verifySignature(both, BODY, [old], { nowSeconds: T })).toBe(true);
    expect(verifySignature(`t=${T},v1=${V1}`, BODY, [old, SECRET], { nowSeconds: T })).toBe(true);
    // Upper-case hex and spaces after commas are fine; unknown schemes are ignored.
    expect(verifySignature(`t=${T}, v0=abc, v1=${V1.toUpperCase()}`, BODY, [SECRET], { nowSeconds: T })).toBe(
      true,
    );
  });

  it('parses strictly: one t, at least one v1 of 64 hex digits', () => {
    for (const bad of [
      undefined,
      '',
      `v1=${V1}`,
      `t=${T}`,
      `t=${T},t=${T},v1=${V1}`,
      `t=-1,v1=${V1}`,
      `t=1.5,v1=${V1}`,
      `t=${T},v1=${V1.slice(2)}`,
      `t=${T},v1=${V1}zz`,
      `t=${T};v1=${V1}`,
      `t=${T},${`v1=${V1},`.repeat(9)}`.slice(0, -1),
      `t=${T},v1=${V1},x=${'a'.repeat(3000)}`,
    ]) {
      expect(parseSignatureHeader(bad)).toBeNull();
    }
    expect(parseSignatureHeader(`t=${T},v1=${V1}`)?.timestamp).toBe(T);
  });

  it('checks secrets once: at least 16 bytes, 1 to 8 of them', () => {
    expect(validateSecrets('secret', SECRET)).toEqual([SECRET]);
    for (const bad of ['', 'short', [], [SECRET, 'short'], 42, Array(9).fill(SECRET)]) {
      expect(() => validateSecrets('secret', bad)).toThrow(InvalidOptionError);
    }
    // The message never repeats the secret.
    try {
      validateSecrets('secret', 'my-short-secret');
    } catch (err) {
      expect((err as Error).message).not.toContain('my-short-secret');
    }
    expect(parseSecretList(' a-secret , b-secret ,, ')).toEqual(['a-secret', 'b-secret']);
  });
});

describe('readLimited', () => {
  const stream = (chunks: number[]) =>
    new ReadableStream<Uint8Array>({
      start(c) {
        for (const n of chunks) c.enqueue(new Uint8Array(n));
        c.close();
      },
    });

  it('returns the bytes up to the limit and null past it, without reading further', async () => {
    expect((await readLimited(stream([3, 4]), 7, 'cancel'))?.byteLength).toBe(7);
    expect((await readLimited(null, 7, 'cancel'))?.byteLength).toBe(0);
    let pulled = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(c) {
        pulled++;
        c.enqueue(new Uint8Array(1024));
      },
    });
    expect(await readLimited(endless, 10 * 1024, 'cancel')).toBeNull();
    expect(pulled).toBeLessThan(13);
  });
});
