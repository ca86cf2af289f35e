import { fileURLToPath } from 'node:url';

/** The file each pool thread runs (pool-worker.ts beside this module, .js once built): Piscina takes a file
 * name, so the coordinator asks this folder where its entry point is rather than spelling a path to it. */
export function poolWorkerEntry(): string {
  const ext = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
  return fileURLToPath(new URL(`./pool-worker${ext}`, import.meta.url));
}
