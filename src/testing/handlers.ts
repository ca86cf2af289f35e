import { InvalidOptionError, UnknownKindError } from '../model/errors.js';
import type { AnyHandlerEntry, HandlerEntry } from '../model/handler.js';
import type { Job, JobHandler } from '../model/job.js';
import type { JobKind } from '../model/job-kind.js';

// The handlers a test runs jobs with: the entries defineHandler() makes, one or a list, as `awa work` and
// WorkerHost.registerAll() take them.

export type Handlers = AnyHandlerEntry | readonly AnyHandlerEntry[];

/** The entries as a list, checked: each a kind from defineJob() and a function, no kind twice. */
export function handlerList(handlers: Handlers): HandlerEntry[] {
  const list = (Array.isArray(handlers) ? handlers : [handlers]) as HandlerEntry[];
  const seen = new Set<string>();
  list.forEach((entry, i) => {
    if (typeof entry?.kind?.kind !== 'string' || typeof entry.handle !== 'function')
      throw new InvalidOptionError(`handlers[${i}]`, 'must be what defineHandler(kind, handler) returns');
    if (seen.has(entry.kind.kind))
      throw new InvalidOptionError(`handlers[${i}]`, `"${entry.kind.kind}" already has a handler`);
    seen.add(entry.kind.kind);
  });
  return list;
}

/** The definition of `kind` among the handlers (a kind named by its string takes its handler's definition, so
 * its queue and maxAttempts apply). Fails with UnknownKindError when no handler runs it. */
export function kindAmong(list: readonly HandlerEntry[], kind: JobKind<unknown> | string): JobKind<unknown> {
  const name = typeof kind === 'string' ? kind : kind?.kind;
  const entry = list.find((e) => e.kind.kind === name);
  if (!entry)
    throw new UnknownKindError(
      String(name),
      list.map((e) => e.kind.kind),
    );
  return typeof kind === 'string' ? entry.kind : kind;
}

/** The queues the handlers' kinds go to by default, each once. */
export function queuesOf(list: readonly HandlerEntry[]): string[] {
  return [...new Set(list.map((e) => e.kind.queue))];
}

/** The entries with each handler wrapped to tell `onStart` first: the same handler, job and context. When
 * `onStart` returns a promise, the handler starts once it has resolved. */
export function watched(
  list: readonly HandlerEntry[],
  onStart: (job: Job) => Promise<void> | void,
): HandlerEntry[] {
  return list.map(({ kind, handle }) => ({
    kind,
    handle: ((job, ctx) => {
      const wait = onStart(job);
      return wait ? wait.then(() => handle(job, ctx)) : handle(job, ctx);
    }) as JobHandler,
  }));
}
