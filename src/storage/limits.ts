import type { Actor } from '../model/audit.js';
import { UnknownQueueError } from '../model/errors.js';
import type { LimitsOverride, QueueLimits } from '../model/limits.js';
import { audited, type Audited } from './audit.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Flow control's operator side (sql/functions/engine/limits.sql, sql/functions/reads/limits.sql): what each
// queue's limits are and hold now, and an operator's override of what the hosts declared.

/** One key of a limited queue, as queueLimits() reads it. */
export interface LimitKeyState {
  key: string;
  /** Attempts of the key running now (holding one of its slots). */
  running: number;
  /** Its jobs waiting at the gate for room. */
  waiting: number;
  /** Its starts within its rate's period (0 without a per-key rate). */
  recentStarts: number;
}

export interface QueueLimitsState {
  queue: string;
  /** What the hosts' code declared (the last host to start), or null. */
  declared: QueueLimits | null;
  /** What an operator set over it, or null. */
  override: LimitsOverride | null;
  /** What claims apply, or null when nothing is limited. */
  effective: QueueLimits | null;
  /** Attempts of the queue running now under its limits. */
  running: number;
  /** Jobs waiting at the gate (counted as available). */
  waiting: number;
  /** The busiest keys (running, then waiting), at most the number asked for. */
  keys: LimitKeyState[];
}

/** The limits of every queue that has any, or of one (empty when it has none). */
export async function queueLimits(
  db: Queryable,
  schema: Schema,
  queue: string | null,
  keys: number,
): Promise<QueueLimitsState[]> {
  const { rows } = await db.query<
    Omit<QueueLimitsState, 'running' | 'waiting'> & { running: string; waiting: string }
  >(
    `select queue, declared, override, effective, running::text, waiting::text, keys
       from ${schema.ident}.queue_limits($1, $2)`,
    [queue, keys],
  );
  return rows.map((r) => ({ ...r, running: Number(r.running), waiting: Number(r.waiting) }));
}

/** Sets (null: clears) an operator's override of a queue's limits; returns the limits now in effect. Throws
 * UnknownQueueError for a queue nothing names, unless `create`. */
export async function setLimitsOverride(
  db: Queryable,
  schema: Schema,
  queue: string,
  override: LimitsOverride | null,
  by: Actor,
  create = false,
): Promise<Audited<QueueLimits | null>> {
  const { rows, record } = await audited<{ known: boolean; effective: QueueLimits | null }>(
    db,
    schema,
    { by, action: override === null ? 'queue.limits.reset' : 'queue.limits', target: queue },
    {
      ctes: `act as (select $3::boolean or ${schema.ident}.queue_known($1) as known,
                            case when $3::boolean or ${schema.ident}.queue_known($1)
                                 then ${schema.ident}.set_limits_override($1, $2::jsonb) end as effective)`,
      values: [queue, override === null ? null : JSON.stringify(override), create],
      detail: `jsonb_build_object('override', $2::jsonb)`,
      when: `(select a.known from act a)`,
    },
  );
  if (!rows[0]?.known) throw new UnknownQueueError(queue);
  return { value: rows[0].effective, record };
}
