import { InvalidOptionError } from '../model/errors.js';
import type { HandlerEntry } from '../model/handler.js';
import type { JobHandler } from '../model/job.js';
import type { JobKind } from '../model/job-kind.js';
import { isHttpTarget } from './http-target.js';

// Which handler runs which kind, in this process.

export class HandlerRegistry {
  private readonly byKind = new Map<string, HandlerEntry>();

  add<Args, Result>(kind: JobKind<Args, Result>, handle: JobHandler<Args, Result>): void {
    if (!kind || typeof kind.kind !== 'string')
      throw new InvalidOptionError('kind', 'must be a definition from defineJob()');
    if (typeof handle !== 'function')
      throw new InvalidOptionError(`handler for "${kind.kind}"`, 'must be a function');
    if (kind.execution === 'pool' && isHttpTarget(handle))
      throw new InvalidOptionError(
        `handler for "${kind.kind}"`,
        'an HTTP target runs on the coordinator: define the kind with execution "inline"',
      );
    if (this.byKind.has(kind.kind))
      throw new InvalidOptionError('kind', `"${kind.kind}" already has a handler`);
    this.byKind.set(kind.kind, { kind, handle } as HandlerEntry);
  }

  entries(): HandlerEntry[] {
    return [...this.byKind.values()];
  }

  get(kind: string): HandlerEntry | undefined {
    return this.byKind.get(kind);
  }

  kinds(): string[] {
    return [...this.byKind.keys()];
  }

  /** Kinds whose handlers run on the host's own thread (not in the worker-thread pool). */
  inlineKinds(): string[] {
    return this.entries()
      .filter((e) => e.kind.execution !== 'pool')
      .map((e) => e.kind.kind);
  }
}
