import type { StandardSchemaV1 } from '@standard-schema/spec';
import { InvalidArgsError, InvalidOptionError } from './errors.js';
import { resolveDescription, type Description } from './descriptor.js';
import { resolveUnique, type ResolvedUnique, type UniqueOptions } from './unique.js';
import {
  validateInt,
  validateMaxAttempts,
  validateName,
  validatePriority,
  type Priority,
} from './validation.js';

export type Execution = 'inline' | 'pool';

export interface JobKindOptions<Args> {
  /** Stable name stored with every job, e.g. "send_email". */
  kind: string;
  /** Queue jobs of this kind go to unless enqueue says otherwise. Default "default". */
  queue?: string;
  /** 1 (most urgent) to 4. Default 2. */
  priority?: Priority;
  /** Attempts before the job fails for good. Default 25. */
  maxAttempts?: number;
  /** Any Standard Schema validator (zod, valibot, arktype…); args are checked at enqueue. */
  schema?: StandardSchemaV1<unknown, Args>;
  /** Where the handler runs: on the coordinator's thread (default) or in the worker-thread pool. */
  execution?: Execution;
  /** Hard limit per attempt: past it the handler's signal aborts and the attempt is retried (or fails). */
  deadlineMs?: number;
  /** Jobs of this kind are unique (see UniqueOptions); an enqueue may override it. */
  unique?: UniqueOptions | boolean;
  /** What operators see about this kind (label, description, owner, docs URL). */
  describe?: Description;
}

/** A typed job kind: the contract between producers and the handler. `Result` is what its handler returns, stored
 * with the completion (docs/flows.md, "Results"); give it as the second type argument of defineJob to have
 * handlers checked against it and `result()` typed by it. */
export interface JobKind<Args = unknown, Result = unknown> {
  readonly kind: string;
  readonly queue: string;
  readonly priority: Priority;
  readonly maxAttempts: number;
  readonly execution: Execution;
  /** 0 when the kind has no deadline of its own. */
  readonly deadlineMs: number;
  /** Set when jobs of this kind are unique by default. */
  readonly unique?: ResolvedUnique;
  readonly description: Description;
  readonly schema?: StandardSchemaV1<unknown, Args>;
  /** Checks args against the schema (if any) and returns the validated value. */
  validate(args: unknown): Promise<Args>;
  /** The result type, for the type checker only: never set. */
  readonly '~result'?: Result;
}

export const DEFAULT_QUEUE = 'default';
export const DEFAULT_PRIORITY: Priority = 2;
export const DEFAULT_MAX_ATTEMPTS = 25;
/** Most enqueue shards (lanes per priority) a queue may be split into; sql/migrations/009 checks the same. */
export const MAX_ENQUEUE_SHARDS = 64;

export function defineJob<Args = unknown, Result = unknown>(
  options: JobKindOptions<Args>,
): JobKind<Args, Result> {
  const kind = validateName('kind', options.kind);
  const queue = validateName('queue', options.queue ?? DEFAULT_QUEUE);
  const priority = validatePriority('priority', options.priority ?? DEFAULT_PRIORITY);
  const maxAttempts = validateMaxAttempts('maxAttempts', options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS);
  const execution = options.execution ?? 'inline';
  if (execution !== 'inline' && execution !== 'pool') {
    throw new InvalidOptionError('execution', `must be "inline" or "pool", got ${String(execution)}`);
  }
  const deadlineMs =
    options.deadlineMs === undefined ? 0 : validateInt('deadlineMs', options.deadlineMs, 1, 7 * 86_400_000);
  const schema = options.schema;
  const unique = resolveUnique('unique', options.unique);
  const description = resolveDescription('describe', options.describe);
  return {
    description,
    kind,
    queue,
    priority,
    maxAttempts,
    execution,
    deadlineMs,
    ...(unique ? { unique } : {}),
    schema,
    async validate(args: unknown): Promise<Args> {
      if (!schema) return args as Args;
      return argsOrThrow(kind, await schema['~standard'].validate(args));
    },
  };
}

/**
 * The kind's args check, synchronous whenever it can be: `{ value }` at once when the kind has no schema or
 * its schema answers synchronously (most do), a Promise of the value only for a schema that is async. Bulk
 * producers build one row per job, and a promise per row is a measurable part of their cost.
 */
export function checkArgs(kind: JobKind<unknown>, args: unknown): { value: unknown } | Promise<unknown> {
  const schema = kind.schema as StandardSchemaV1<unknown, unknown> | undefined;
  if (!schema) return { value: args };
  const result = schema['~standard'].validate(args);
  if (result instanceof Promise) return result.then((r) => argsOrThrow(kind.kind, r));
  return { value: argsOrThrow(kind.kind, result) };
}

function argsOrThrow<T>(kind: string, result: StandardSchemaV1.Result<T>): T {
  if (result.issues) {
    throw new InvalidArgsError(
      kind,
      result.issues.map((issue) => ({ message: issue.message, path: issuePath(issue.path) })),
    );
  }
  return result.value;
}

export function issuePath(path: StandardSchemaV1.Issue['path']): string | undefined {
  if (!path || path.length === 0) return undefined;
  return path.map((p) => String(typeof p === 'object' ? p.key : p)).join('.');
}

/** The args type a JobKind carries, for typing handlers and enqueue calls. */
export type ArgsOf<K> = K extends JobKind<infer A, unknown> ? A : never;

/** The result type a JobKind carries: what its handler returns, and result() resolves with. */
export type ResultOf<K> = K extends { readonly '~result'?: infer R } ? R : never;

/** A kind as a caller gives it: a definition from defineJob(), or a name, which becomes a kind of that name with
 * the defaults (kept in `adHoc` when given, so a producer defines each name once). */
export function kindOf(
  kind: JobKind<unknown> | string,
  adHoc?: Map<string, JobKind<unknown>>,
): JobKind<unknown> {
  if (typeof kind !== 'string') {
    if (!kind || typeof kind.validate !== 'function') {
      throw new InvalidOptionError('kind', 'must be a kind name or a definition from defineJob()');
    }
    return kind;
  }
  let def = adHoc?.get(kind);
  if (!def) {
    def = defineJob({ kind });
    adHoc?.set(kind, def);
  }
  return def;
}
