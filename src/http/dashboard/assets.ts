import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// The dashboard's static files (one script, one stylesheet), read once. They ship as source in
// src/http/dashboard/assets: beside this module when run from src/ (tsx, tests), and found from
// dist/src/http/dashboard/ through the package root after a build.

export interface Asset {
  body: string;
  type: string;
}

const FILES: Record<string, string> = {
  'dashboard.js': 'text/javascript; charset=utf-8',
  'dashboard.css': 'text/css; charset=utf-8',
};

let cache: Map<string, Asset> | null = null;

function assetDir(): string {
  const here = fileURLToPath(new URL('./assets/', import.meta.url));
  if (existsSync(here)) return here;
  return fileURLToPath(new URL('../../../../src/http/dashboard/assets/', import.meta.url));
}

/** The asset of that file name, or undefined for any other name (no path is ever built from the request). */
export function asset(file: string): Asset | undefined {
  if (!cache) {
    const dir = assetDir();
    cache = new Map(
      Object.entries(FILES).map(([f, type]) => [f, { body: readFileSync(`${dir}${f}`, 'utf8'), type }]),
    );
  }
  return cache.get(file);
}
