import { availableParallelism } from 'node:os';
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidOptionError } from '../model/errors.js';
import { describe, rejectUnknownKeys, validateInt, validatePlainObject } from '../model/validation.js';

// The thread pool's options, validated once: by the host when it resolves its config, and by a PoolExecutor
// built directly.

/** The worker-thread pool for CPU-heavy kinds. (`pool` is taken: it is the pg.Pool option.) */
export interface ThreadPoolOptions {
  /** Absolute path or file: URL of the handlers module; each thread imports it once. */
  module: string;
  /** Threads. Default os.availableParallelism(). */
  size?: number;
  /** Most jobs sent to a thread in one task. Default 32. */
  maxBatch?: number;
  /** How long a job may wait for batch-mates before its task is sent. Default 1 ms. */
  batchDelayMs?: number;
  /** After a job's signal aborts, how long its thread may ignore it before being terminated. Default 5 s. */
  graceMs?: number;
}

export interface ResolvedThreadPool {
  /** file: URL of the handlers module. */
  module: string;
  size: number;
  maxBatch: number;
  batchDelayMs: number;
  graceMs: number;
}

const THREAD_POOL_KEYS = ['module', 'size', 'maxBatch', 'batchDelayMs', 'graceMs'] as const;

/** Validates thread-pool options; `field` prefixes every error ("threadPool.size"). */
export function resolveThreadPool(field: string, value: unknown): ResolvedThreadPool {
  const o = validatePlainObject(field, value);
  rejectUnknownKeys(field, o, THREAD_POOL_KEYS);
  const spec = o.module;
  if (typeof spec !== 'string' || !(spec.startsWith('file:') || isAbsolute(spec))) {
    throw new InvalidOptionError(
      `${field}.module`,
      `must be an absolute path or a file: URL, got ${describe(spec)}`,
    );
  }
  const int = (key: string, dflt: number, min: number, max: number): number =>
    o[key] === undefined ? dflt : validateInt(`${field}.${key}`, o[key], min, max);
  return {
    module: spec.startsWith('file:') ? spec : pathToFileURL(spec).href,
    size: int('size', availableParallelism(), 1, 1024),
    maxBatch: int('maxBatch', 32, 1, 10_000),
    batchDelayMs: int('batchDelayMs', 1, 0, 60_000),
    graceMs: int('graceMs', 5_000, 0, 3_600_000),
  };
}
