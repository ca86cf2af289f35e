import { InvalidOptionError } from './errors.js';
import { rejectUnknownKeys, validatePlainObject } from './validation.js';

// The audit trail's vocabulary: who acted and from where, what they did, and the record kept of it. Every
// operator action (queue pause and resume, enqueue shards, job cancel and retry, DLQ retry and purge, cron
// changes, dashboard logins) writes one record in the same transaction as the action itself.

/** Who performed an operator action, and from where (a client address, `cli@<host>`, `<host>:<pid>`). */
export interface Actor {
  who: string;
  origin: string;
}

/** The optional last argument of every operator method of AwaClient. */
export interface ActorOptions {
  /** Who is acting. Default: the client's `actor` option, else `process` from `<host name>:<pid>`. */
  actor?: Actor;
}

/** The actions Awa itself records; `recordAudit` may add others (lower-case words, dots, dashes, underscores). */
export type AuditAction =
  | 'queue.pause'
  | 'queue.resume'
  | 'queue.shards'
  | 'queue.remove'
  | 'queue.limits'
  | 'queue.limits.reset'
  | 'job.cancel'
  | 'flow.cancel'
  | 'job.retry'
  | 'dlq.retry'
  | 'dlq.purge'
  | 'cron.pause'
  | 'cron.resume'
  | 'cron.trigger'
  | 'cron.remove'
  | 'callback.complete'
  | 'callback.fail'
  | 'callback.retry'
  | 'callback.cancel'
  | 'callback.resume'
  | 'dashboard.login'
  | 'dashboard.login_failed';

/** One row of the audit trail. */
export interface AuditRecord {
  /** Increasing: newer records have larger ids (the paging key). */
  id: string;
  at: Date;
  actor: string;
  origin: string;
  action: string;
  /** What was acted on: a queue, a job id, a schedule; null when the detail holds it (several DLQ ids). */
  target: string | null;
  /** The action's parameters and outcome, e.g. `{ changed: true }` or `{ ids: [...], retried: [...] }`. */
  detail: Record<string, unknown> | null;
}

/** A page of the audit trail, newest first (AwaClient.auditLog). */
export interface AuditFilter {
  /** Records older than this id (the last id of the previous page). */
  beforeId?: string;
  action?: string;
  actor?: string;
  /** 1..1000, default 50. */
  limit?: number;
}

const MAX_WHO = 200;
const MAX_ORIGIN = 300;
export const AUDIT_ACTION_PATTERN = /^[a-z][a-z0-9_.-]{0,63}$/;

/** Checks an actor given to an operator method; the field names the bad part. */
export function validateActor(field: string, value: unknown): Actor {
  validatePlainObject(field, value);
  rejectUnknownKeys(field, value as Record<string, unknown>, ['who', 'origin']);
  const { who, origin } = value as Record<string, unknown>;
  return {
    who: auditText(`${field}.who`, who, MAX_WHO),
    origin: auditText(`${field}.origin`, origin, MAX_ORIGIN),
  };
}

/** The `actor` of an operator method's options, or undefined when none is given. */
export function actorOption(
  options: ActorOptions | undefined,
  extraKeys: readonly string[] = [],
): Actor | undefined {
  if (options === undefined) return undefined;
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options as Record<string, unknown>, ['actor', ...extraKeys]);
  return options.actor === undefined ? undefined : validateActor('options.actor', options.actor);
}

export function validateAuditAction(field: string, value: unknown): string {
  if (typeof value !== 'string' || !AUDIT_ACTION_PATTERN.test(value)) {
    throw new InvalidOptionError(
      field,
      'must be 1 to 64 lower-case letters, digits, dots, dashes or underscores, starting with a letter (e.g. "queue.pause")',
    );
  }
  return value;
}

function auditText(field: string, value: unknown, max: number): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > max) {
    throw new InvalidOptionError(field, `must be a string of 1 to ${max} characters`);
  }
  // A record is read in terminals and pages, where control characters would act rather than show.
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(value) || !value.isWellFormed()) {
    throw new InvalidOptionError(field, 'must not contain control characters or lone surrogates');
  }
  return value;
}

/** Makes text from outside (a username typed into a login form) fit an actor field: control characters become
 * '?', and it is cut to the field's length. */
export function auditSafe(text: string, max = MAX_WHO): string {
  // eslint-disable-next-line no-control-regex
  const clean = text.toWellFormed().replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
  return clean.length === 0 ? '(empty)' : clean.slice(0, max);
}

/** The one structured log line of a record: `[awa] audit {json}`. */
export function auditLine(record: AuditRecord): string {
  return `[awa] audit ${JSON.stringify({ ...record, at: record.at.toISOString() })}`;
}
