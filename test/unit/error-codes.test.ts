import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// docs/errors.md is the operator's list of every code Awa raises; a code added to the model without a row
// there would be one an operator meets with no explanation. Both lists are read from the files themselves.

const root = new URL('../../', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), 'utf8');

function modelCodes(): string[] {
  const source = read('src/model/errors.ts');
  const union = /export type AwaErrorCode =([^;]*);/.exec(source)?.[1] ?? '';
  return [...union.matchAll(/'(AWA_[A-Z_]+)'/g)].map((m) => m[1]!);
}

function documentedCodes(): string[] {
  return [...read('docs/errors.md').matchAll(/^\| `(AWA_[A-Z_]+)`/gm)].map((m) => m[1]!);
}

describe('error codes', () => {
  it('docs/errors.md has one row for every code of the model, and none the model does not have', () => {
    const model = modelCodes();
    expect(model.length).toBeGreaterThan(20);
    expect([...documentedCodes()].sort()).toEqual([...model].sort());
  });

  it('every code of the model is raised somewhere in the source', () => {
    const files = readdirSync(new URL('src/', root), { recursive: true, encoding: 'utf8' })
      .filter((path) => path.endsWith('.ts'))
      .map((path) => read(`src/${path}`));
    expect(files.length).toBeGreaterThan(100);
    const raised = (code: string) =>
      files.some((text) => new RegExp(`(super|AwaError)\\(\\s*'${code}'`).test(text));
    expect(modelCodes().filter((code) => !raised(code))).toEqual([]);
  });
});
