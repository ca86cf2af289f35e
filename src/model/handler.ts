import type { JobHandler } from './job.js';
import type { JobKind } from './job-kind.js';

// A kind paired with its handler: what a handlers module exports for `awa work` and the thread pool.

export interface HandlerEntry<Args = unknown, Result = unknown> {
  kind: JobKind<Args, Result>;
  handle: JobHandler<Args, Result>;
}

/** An entry of any kind, whatever its args: what a list of handlers holds. (HandlerEntry<never> would refuse
 * every kind whose args are typed: a JobKind is not covariant in them.) */
export interface AnyHandlerEntry {
  readonly kind: JobKind<unknown>;
  readonly handle: JobHandler<never>;
}

/** Pairs a kind with its handler, e.g. for the handlers module `awa work` loads. */
export function defineHandler<Args, Result = unknown>(
  kind: JobKind<Args, Result>,
  handle: JobHandler<Args, Result>,
): HandlerEntry<Args, Result> {
  return { kind, handle };
}
