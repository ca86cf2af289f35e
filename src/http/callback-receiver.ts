import { Hono, type Context } from 'hono';
import { AwaError, InvalidOptionError } from '../model/errors.js';
import { discardLimited, readLimited } from '../model/limited-body.js';
import {
  DEFAULT_TOLERANCE_SECONDS,
  isFresh,
  parseSignatureHeader,
  SIGNATURE_HEADER,
  signatureMatches,
  validateSecrets,
} from '../model/signature.js';
import { rejectUnknownKeys, validateInt, validatePlainObject } from '../model/validation.js';
import type { AwaClient } from '../roles.js';
import type { CallbackAction, CallbackDelivery } from '../storage/index.js';

// The signed HTTP callback receiver: a fetch-style handler (Hono) that delivers external callbacks through
// AwaClient. docs/callbacks.md states the contract. In order:
//   1. the Awa-Signature header must be well formed with a fresh timestamp          else 401
//   2. the body is read up to maxBodyBytes (refused once it is larger; see tooLarge)  else 413
//   3. its HMAC must match one of the secrets                                       else 401
//   4. it must be a JSON callback { token, action, payload?, error?, delayMs? }     else 400
//   5. settled / delivered → 200 { outcome, jobId }; rejected (stale or used token) → 409 { outcome }
// Nothing is looked up before step 3, and every 401 is the same answer, so an unauthenticated caller learns
// nothing about tokens. A replay within the tolerance window is authentic but its token is used: 409.

/** The AwaClient methods the receiver uses. */
export type CallbackClient = Pick<
  AwaClient,
  'completeExternal' | 'failExternal' | 'retryExternal' | 'cancelExternal' | 'resumeExternal'
>;

export interface CallbackReceiverOptions {
  client: CallbackClient;
  /** The shared secret callers sign with (at least 16 bytes)… */
  secret?: string;
  /** …or several, while rotating: a callback signed with any of them is accepted. */
  secrets?: readonly string[];
  /** Largest difference between the signature's timestamp and this clock. Default 300 s. */
  toleranceSeconds?: number;
  /** Largest body accepted. Default 1 MiB. */
  maxBodyBytes?: number;
  /** Failures that are not the caller's (the database is down…); they answer 500. Default: stderr. */
  onError?: (err: unknown) => void;
}

const OPTION_KEYS = ['client', 'secret', 'secrets', 'toleranceSeconds', 'maxBodyBytes', 'onError'] as const;
export const DEFAULT_MAX_CALLBACK_BODY_BYTES = 1024 * 1024;
/** How much of a body over maxBodyBytes the receiver reads and drops so its sender can read the 413. */
export const DISCARD_BYTES = 16 * 1024 * 1024;

const ACTIONS: Record<CallbackAction, readonly string[]> = {
  complete: ['payload'],
  fail: ['error', 'payload'],
  retry: ['error', 'delayMs'],
  cancel: ['error'],
  resume: ['payload'],
};
const MAX_ERROR_CHARS = 2000;

const NO_STORE = { 'Cache-Control': 'no-store' };

/**
 * Builds the callback receiver: a Hono app answering `POST /` (mount it where you like; `awa serve` and
 * createHttpApp put it at /callbacks). Use it as `app.fetch(request)`, or mount it in any Node HTTP server
 * with @hono/node-server.
 */
export function createCallbackReceiver(options: CallbackReceiverOptions): Hono {
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options, OPTION_KEYS);
  const { client } = options;
  if (!client || typeof client.completeExternal !== 'function' || typeof client.failExternal !== 'function') {
    throw new InvalidOptionError('client', 'must be an AwaClient');
  }
  if ((options.secret === undefined) === (options.secrets === undefined)) {
    throw new InvalidOptionError('secret', 'give exactly one of secret or secrets');
  }
  const secrets =
    options.secret !== undefined
      ? validateSecrets('secret', options.secret)
      : validateSecrets('secrets', options.secrets);
  const tolerance =
    options.toleranceSeconds === undefined
      ? DEFAULT_TOLERANCE_SECONDS
      : validateInt('toleranceSeconds', options.toleranceSeconds, 1, 86_400);
  const maxBodyBytes =
    options.maxBodyBytes === undefined
      ? DEFAULT_MAX_CALLBACK_BODY_BYTES
      : validateInt('maxBodyBytes', options.maxBodyBytes, 64, 64 * 1024 * 1024);
  const onError =
    options.onError ??
    ((err: unknown) =>
      console.error(`[awa] callback receiver: ${err instanceof Error ? err.message : String(err)}`));

  const unauthorized = (c: Context) => c.json({ error: 'unauthorized' }, 401, NO_STORE);
  // A body too large is read on and dropped, up to DISCARD_BYTES, so that the sender can read the 413 (a
  // client still sending when the answer comes sees EPIPE or a reset instead); past that, the answer goes at
  // once and the connection closes under the rest.
  const tooLarge = async (c: Context, unread: number | null) => {
    if (unread === null || unread <= DISCARD_BYTES) await discardLimited(c.req.raw.body, DISCARD_BYTES);
    return c.json({ error: 'payload_too_large', maxBodyBytes }, 413, { ...NO_STORE, Connection: 'close' });
  };
  const badRequest = (c: Context, message: string) =>
    c.json({ error: 'bad_request', message }, 400, NO_STORE);

  const app = new Hono();
  app.post('/', async (c) => {
    const parsed = parseSignatureHeader(c.req.header(SIGNATURE_HEADER));
    if (!parsed || !isFresh(parsed.timestamp, tolerance)) return unauthorized(c);
    const declared = c.req.header('Content-Length');
    if (declared !== undefined && Number(declared) > maxBodyBytes) return tooLarge(c, Number(declared));
    const body = await readLimited(c.req.raw.body, maxBodyBytes, 'release');
    if (!body) return tooLarge(c, null);
    if (!signatureMatches(parsed, body, secrets)) return unauthorized(c);

    const callback = parseCallback(body);
    if (typeof callback === 'string') return badRequest(c, callback);
    let delivery: CallbackDelivery;
    try {
      delivery = await deliver(client, callback);
    } catch (err) {
      // The caller's input (a token that is no UUID, a payload too large or not storable, a bad delay)…
      if (err instanceof AwaError && CALLER_ERRORS.has(err.code)) return badRequest(c, err.message);
      // …or ours, which the caller need not see.
      onError(err);
      return c.json({ error: 'internal' }, 500, NO_STORE);
    }
    if (delivery.outcome === 'rejected') return c.json({ outcome: 'rejected' }, 409, NO_STORE);
    return c.json({ outcome: delivery.outcome, jobId: delivery.jobId }, 200, NO_STORE);
  });
  app.all('/', (c) => c.json({ error: 'method_not_allowed' }, 405, { ...NO_STORE, Allow: 'POST' }));
  return app;
}

const CALLER_ERRORS = new Set<string>([
  'AWA_INVALID_OPTION',
  'AWA_PAYLOAD_TOO_LARGE',
  'AWA_PAYLOAD_NOT_SERIALISABLE',
]);

interface Callback {
  token: string;
  action: CallbackAction;
  payload?: unknown;
  error?: string;
  delayMs?: number;
}

/** The callback a body carries, or what is wrong with it. */
function parseCallback(body: Uint8Array): Callback | string {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
  } catch {
    return 'the body is not JSON (UTF-8)';
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return 'the body must be a JSON object { token, action, payload?, error?, delayMs? }';
  }
  const v = value as Record<string, unknown>;
  if (typeof v.token !== 'string') return '"token" must be the callback token (a string)';
  if (typeof v.action !== 'string' || !Object.hasOwn(ACTIONS, v.action)) {
    return `"action" must be one of ${Object.keys(ACTIONS).join(', ')}`;
  }
  const action = v.action as CallbackAction;
  const allowed = ACTIONS[action];
  for (const key of Object.keys(v)) {
    if (key !== 'token' && key !== 'action' && !allowed.includes(key)) {
      return `"${key}" is not accepted with action "${action}" (accepted: ${['token', 'action', ...allowed].join(', ')})`;
    }
  }
  if (v.error !== undefined && (typeof v.error !== 'string' || v.error.length > MAX_ERROR_CHARS)) {
    return `"error" must be a string of at most ${MAX_ERROR_CHARS} characters`;
  }
  if (v.delayMs !== undefined && (typeof v.delayMs !== 'number' || !Number.isInteger(v.delayMs))) {
    return '"delayMs" must be an integer number of milliseconds';
  }
  return {
    token: v.token,
    action,
    payload: v.payload,
    error: v.error as string | undefined,
    delayMs: v.delayMs as number | undefined,
  };
}

function deliver(client: CallbackClient, cb: Callback): Promise<CallbackDelivery> {
  switch (cb.action) {
    case 'complete':
      return client.completeExternal(cb.token, cb.payload);
    case 'fail':
      return client.failExternal(cb.token, cb.error ?? 'failed by callback', cb.payload);
    case 'retry':
      return client.retryExternal(cb.token, { delayMs: cb.delayMs, error: cb.error });
    case 'cancel':
      return client.cancelExternal(cb.token, cb.error);
    case 'resume':
      return client.resumeExternal(cb.token, cb.payload);
  }
}
