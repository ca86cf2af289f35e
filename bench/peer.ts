import { BenchUsageError } from './args.js';

// The bench's peers (graphile-worker, pg-boss, the OpenTelemetry SDK, tinybench) are development dependencies:
// an installed package does not have them. Each is loaded when a run needs it, so `awa bench --system awa`
// works without them, and a run that needs one that is missing says which package to install.

/** Runs `load` (a dynamic import of a peer, or of a bench module that imports peers); when a package it needs
 * is not installed, throws a usage error naming that package and what needs it. */
export async function loadPeer<T>(purpose: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    const missing = missingPackage(err);
    if (missing === null) throw err;
    throw new BenchUsageError(
      `${purpose} needs the package ${missing}, which this install does not have (a development dependency): npm install ${missing}`,
    );
  }
}

/** The package a failed import could not find, or null when it failed for another reason. */
function missingPackage(err: unknown): string | null {
  if (!(err instanceof Error) || (err as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') return null;
  return /Cannot find package '([^']+)'/.exec(err.message)?.[1] ?? null;
}
