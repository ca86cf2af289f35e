import { InvalidOptionError } from '../model/errors.js';
import type { Job, JobContext, JobHandler } from '../model/job.js';
import { readLimited } from '../model/limited-body.js';
import { FailJob, isValidDelay, MAX_DELAY_MS, RetryAfter, WaitForCallback } from '../model/outcomes.js';
import {
  DEFAULT_TOLERANCE_SECONDS,
  parseSecretList,
  SIGNATURE_HEADER,
  signatureHeader,
  validateSecrets,
  verifySignature,
} from '../model/signature.js';
import { describe, rejectUnknownKeys, validateInt, validatePlainObject } from '../model/validation.js';

// HTTP worker targets: a kind whose attempts run by POSTing the job to a URL. httpTarget() makes an ordinary
// handler, registered like any other, so permits, attempts, deadlines, cancellation, rescue and the retry
// policy are exactly those of local handlers. Per attempt it registers a callback, POSTs
//   { job: { id, kind, queue, args, attempt, maxAttempts, runLease, metadata, callback? }, callback: { token, url? } }
// signed with Awa-Signature, and reads the answer (docs/callbacks.md, "HTTP worker targets"):
//   200 { status: 'done' | 'failed' | 'retry', token, error?, delayMs?, result? } (signed) → completed / failed
//       for good / retried
//   202 → parked (WaitForCallback) until the service calls back with the token, or the callback times out
//   anything else, a network error, a timeout → a failed attempt, retried like any failure.

export interface HttpTargetOptions {
  /** Where each attempt is POSTed (http: or https:). */
  url: string;
  /** Secret shared with the service (at least 16 bytes); a list while rotating: requests carry one v1= per
   * secret, answers may be signed with any. */
  secret?: string | readonly string[];
  /** …or the environment variable holding it (read here, once; several secrets separated by commas). */
  secretEnv?: string;
  /** Longest wait for the answer (headers and body), per attempt. Default 30 s. */
  timeoutMs?: number;
  /** The callback receiver's URL, passed on as callback.url so the service knows where to answer a 202. */
  callbackUrl?: string;
  /** How long a job parked by a 202 waits for its callback before the attempt fails (and is retried like
   * any failure). Default 0: no limit. */
  callbackTimeoutMs?: number;
  /** Require 200 answers to be signed (Awa-Signature over the body) and to echo the callback token. Default
   * true; with false the answer is trusted as received (use only over a channel you trust). */
  signedResponses?: boolean;
  /** Clock tolerance for the answer's signature. Default 300 s. */
  toleranceSeconds?: number;
  /** Largest answer body read. Default 1 MiB. */
  maxResponseBytes?: number;
}

const OPTION_KEYS = [
  'url',
  'secret',
  'secretEnv',
  'timeoutMs',
  'callbackUrl',
  'callbackTimeoutMs',
  'signedResponses',
  'toleranceSeconds',
  'maxResponseBytes',
] as const;

/** An attempt's request to its HTTP target did not succeed: a non-2xx status, a malformed or unsigned
 * answer, a network error, or no answer in time. The attempt is retried like any failure. */
export class HttpTargetError extends Error {
  /** The HTTP status, when an answer came. */
  readonly status?: number;
  constructor(message: string, status?: number, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'HttpTargetError';
    this.status = status;
  }
}

const targets = new WeakSet<JobHandler<never>>();

/** True for a handler made by httpTarget(). */
export function isHttpTarget(handle: unknown): boolean {
  return typeof handle === 'function' && targets.has(handle as JobHandler<never>);
}

/**
 * A handler that runs each attempt on an HTTP service: `host.register(kind, httpTarget({ url, secretEnv }))`
 * or `defineHandler(kind, httpTarget(...))`. Inline kinds only. Options are checked here, once.
 */
export function httpTarget(options: HttpTargetOptions): JobHandler<unknown> {
  const o = resolve(options);
  const where = o.url.origin + o.url.pathname;
  const handle = async (job: Job<unknown>, ctx: JobContext): Promise<void> => {
    if (typeof ctx?.registerCallback !== 'function') {
      throw new FailJob(
        `HTTP target ${where} runs on the coordinator only: define kind "${job.kind}" inline`,
      );
    }
    const token = await ctx.registerCallback({ timeoutMs: o.callbackTimeoutMs });
    const body = JSON.stringify({
      job: {
        id: job.id,
        kind: job.kind,
        queue: job.queue,
        args: job.args,
        attempt: job.attempt,
        maxAttempts: job.maxAttempts,
        runLease: job.runLease,
        metadata: job.metadata,
        ...(job.callback ? { callback: job.callback } : {}),
      },
      callback: { token, ...(o.callbackUrl ? { url: o.callbackUrl } : {}) },
    });
    // The attempt's signal (cancel, rescue, deadline, shutdown) and this request's own timeout both abort it.
    const request = new AbortController();
    const onAbort = () => request.abort(ctx.signal.reason);
    if (ctx.signal.aborted) onAbort();
    else ctx.signal.addEventListener('abort', onAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      request.abort(new Error('timeout'));
    }, o.timeoutMs);
    let verdict: Error | null;
    try {
      const res = await fetch(o.url, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          [SIGNATURE_HEADER]: signatureHeader(o.secrets, body),
        },
        body,
        signal: request.signal,
        redirect: 'manual',
      });
      verdict = await answer(res, token);
    } catch (err) {
      // Cancel, rescue, deadline or shutdown: the attempt is already decided; say why it stopped.
      if (ctx.signal.aborted) throw ctx.signal.reason;
      if (timedOut) {
        throw new HttpTargetError(`${where} did not answer within ${o.timeoutMs} ms`, undefined, {
          cause: err,
        });
      }
      const cause = (err as { cause?: { message?: string } }).cause?.message;
      throw new HttpTargetError(
        `POST ${where} failed: ${(err as Error).message}${cause ? ` (${cause})` : ''}`,
        undefined,
        { cause: err },
      );
    } finally {
      clearTimeout(timer);
      ctx.signal.removeEventListener('abort', onAbort);
    }
    if (verdict) throw verdict;
  };

  /** How the service's answer ends the attempt: null for completed, else the outcome to throw. (What this
   * throws is a failure to read the answer.) */
  async function answer(res: Response, token: string): Promise<Error | null> {
    if (res.status === 202) {
      await res.body?.cancel().catch(() => {});
      return new WaitForCallback(`accepted by ${where}; waiting for its callback`);
    }
    if (res.status !== 200) {
      const text = await readLimited(res.body, 512, 'cancel').catch(() => null);
      const snippet = text
        ? Buffer.from(text).toString('utf8').replace(/\s+/g, ' ').trim().slice(0, 200)
        : '';
      return new HttpTargetError(
        `${where} answered ${res.status}${snippet ? `: ${snippet}` : ''}`,
        res.status,
      );
    }
    const raw = await readLimited(res.body, o.maxResponseBytes, 'cancel');
    if (!raw) return new HttpTargetError(`${where} answered more than ${o.maxResponseBytes} bytes`, 200);
    if (
      o.signedResponses &&
      !verifySignature(res.headers.get(SIGNATURE_HEADER), raw, o.secrets, {
        toleranceSeconds: o.toleranceSeconds,
      })
    ) {
      return new HttpTargetError(`${where} answered 200 without a valid ${SIGNATURE_HEADER}`, 200);
    }
    let reply: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(Buffer.from(raw).toString('utf8'));
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
        throw new Error('not an object');
      reply = parsed as Record<string, unknown>;
    } catch {
      return new HttpTargetError(`${where} answered 200 without a JSON object { status, … }`, 200);
    }
    // A signed answer is bound to this attempt by its token, so one recorded for another attempt cannot be
    // replayed here.
    if (o.signedResponses && reply.token !== token) {
      return new HttpTargetError(
        `${where} answered 200 for another attempt (its token is not this one's)`,
        200,
      );
    }
    const error = typeof reply.error === 'string' ? reply.error.slice(0, 2000) : undefined;
    switch (reply.status) {
      case 'done':
        return null;
      case 'failed':
        return new FailJob(error ?? `failed by ${where}`);
      case 'retry': {
        if (reply.delayMs === undefined) {
          // A plain failure: retried under the backoff rule, the attempt counted.
          const retry = new Error(error ?? `${where} asked for a retry`);
          retry.name = 'ExternalRetry';
          return retry;
        }
        if (!isValidDelay(reply.delayMs)) {
          return new HttpTargetError(
            `${where} asked for a retry with an invalid delayMs (${describe(reply.delayMs)}; 0 to ${MAX_DELAY_MS})`,
            200,
          );
        }
        return new RetryAfter(reply.delayMs, error ?? `${where} asked for a retry in ${reply.delayMs} ms`);
      }
      default:
        return new HttpTargetError(
          `${where} answered 200 with status ${describe(reply.status)} (expected "done", "failed" or "retry")`,
          200,
        );
    }
  }

  targets.add(handle as JobHandler<never>);
  return handle as JobHandler<unknown>;
}

interface ResolvedTarget {
  url: URL;
  secrets: readonly string[];
  timeoutMs: number;
  callbackUrl?: string;
  callbackTimeoutMs: number;
  signedResponses: boolean;
  toleranceSeconds: number;
  maxResponseBytes: number;
}

function resolve(options: HttpTargetOptions): ResolvedTarget {
  validatePlainObject('httpTarget', options);
  rejectUnknownKeys('httpTarget', options, OPTION_KEYS);
  const url = httpUrl('httpTarget.url', options.url);
  if ((options.secret === undefined) === (options.secretEnv === undefined)) {
    throw new InvalidOptionError('httpTarget.secret', 'give exactly one of secret or secretEnv');
  }
  let secrets: readonly string[];
  if (options.secret !== undefined) {
    secrets = validateSecrets('httpTarget.secret', options.secret);
  } else {
    const name = options.secretEnv;
    if (typeof name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      throw new InvalidOptionError(
        'httpTarget.secretEnv',
        `must be an environment variable name, got ${describe(name)}`,
      );
    }
    const value = process.env[name];
    if (!value)
      throw new InvalidOptionError('httpTarget.secretEnv', `environment variable ${name} is not set`);
    secrets = validateSecrets('httpTarget.secretEnv', parseSecretList(value));
  }
  const int = (field: keyof HttpTargetOptions, dflt: number, min: number, max: number) =>
    options[field] === undefined ? dflt : validateInt(`httpTarget.${field}`, options[field], min, max);
  if (options.signedResponses !== undefined && typeof options.signedResponses !== 'boolean') {
    throw new InvalidOptionError(
      'httpTarget.signedResponses',
      `must be a boolean, got ${describe(options.signedResponses)}`,
    );
  }
  return {
    url,
    secrets,
    timeoutMs: int('timeoutMs', 30_000, 1, 86_400_000),
    callbackUrl:
      options.callbackUrl === undefined
        ? undefined
        : httpUrl('httpTarget.callbackUrl', options.callbackUrl).href,
    callbackTimeoutMs: int('callbackTimeoutMs', 0, 0, 30 * 86_400_000),
    signedResponses: options.signedResponses ?? true,
    toleranceSeconds: int('toleranceSeconds', DEFAULT_TOLERANCE_SECONDS, 1, 86_400),
    maxResponseBytes: int('maxResponseBytes', 1024 * 1024, 64, 64 * 1024 * 1024),
  };
}

function httpUrl(field: string, value: unknown): URL {
  let url: URL | null = null;
  try {
    if (typeof value === 'string') url = new URL(value);
  } catch {
    url = null;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new InvalidOptionError(field, `must be an http: or https: URL, got ${describe(value)}`);
  }
  return url;
}
