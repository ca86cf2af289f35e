import { hostname } from 'node:os';
import {
  actorOption,
  auditLine,
  validateActor,
  validateAuditAction,
  type Actor,
  type ActorOptions,
  type AuditFilter,
  type AuditRecord,
} from '../model/audit.js';
import { InvalidOptionError } from '../model/errors.js';
import {
  isJobId,
  rejectUnknownKeys,
  validateInt,
  validateName,
  validatePlainObject,
} from '../model/validation.js';

// A client's side of the audit trail (docs/operations.md, "Audit trail"): who its operator actions are recorded
// as, and where a record goes once its action has committed. The record itself is written by storage, in the
// action's own statement.

export class AuditTrail {
  /** Who actions are recorded as when a call names no actor; null: this process. */
  private readonly actor: Actor | null;
  private readonly onAudit: (record: AuditRecord) => void;

  constructor(actor: Actor | undefined, onAudit: ((record: AuditRecord) => void) | undefined) {
    this.actor = actor === undefined ? null : validateActor('actor', actor);
    if (onAudit !== undefined && typeof onAudit !== 'function')
      throw new InvalidOptionError('onAudit', 'must be a function (record) => void');
    this.onAudit = onAudit ?? ((record) => console.error(auditLine(record)));
  }

  /** Callback deliveries are operator actions only for a client that acts for someone (the CLI's). */
  get auditsCallbacks(): boolean {
    return this.actor !== null;
  }

  /** Who an action is recorded as: the call's actor, the client's, or this process. */
  actorOf(options: ActorOptions | undefined, extraKeys: readonly string[] = []): Actor {
    return (
      actorOption(options, extraKeys) ??
      this.actor ?? { who: 'process', origin: `${hostname()}:${process.pid}` }
    );
  }

  /** Hands a committed record to onAudit; a throwing listener must not turn a done action into a failure. */
  report(record: AuditRecord): void {
    try {
      this.onAudit(record);
    } catch (err) {
      console.error(`[awa] onAudit threw: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}

export interface AuditEntry {
  action: string;
  target: string | null;
  detail: Record<string, unknown> | null;
}

/** An action of the caller's own for recordAudit(), validated. */
export function auditEntry(entry: {
  action: string;
  target?: string | null;
  detail?: Record<string, unknown> | null;
}): AuditEntry {
  validatePlainObject('entry', entry);
  rejectUnknownKeys('entry', entry, ['action', 'target', 'detail']);
  const action = validateAuditAction('entry.action', entry.action);
  const target = entry.target ?? null;
  if (target !== null && (typeof target !== 'string' || target.length > 1000))
    throw new InvalidOptionError('entry.target', 'must be a string of at most 1000 characters, or null');
  const detail = entry.detail ?? null;
  if (detail !== null) validatePlainObject('entry.detail', detail);
  return { action, target, detail };
}

/** A page of the trail asked for by auditLog(), validated, with its default limit. */
export function auditFilter(filter: AuditFilter): {
  beforeId: string | null;
  action: string | null;
  actor: string | null;
  limit: number;
} {
  validatePlainObject('filter', filter);
  rejectUnknownKeys('filter', filter, ['beforeId', 'action', 'actor', 'limit']);
  if (filter.beforeId !== undefined && !isJobId(filter.beforeId))
    throw new InvalidOptionError('filter.beforeId', 'must be an audit record id (digits)');
  if (filter.action !== undefined) validateAuditAction('filter.action', filter.action);
  if (filter.actor !== undefined) validateName('filter.actor', filter.actor);
  return {
    beforeId: filter.beforeId ?? null,
    action: filter.action ?? null,
    actor: filter.actor ?? null,
    limit: filter.limit === undefined ? 50 : validateInt('filter.limit', filter.limit, 1, 1000),
  };
}
