import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { parse, print, withClient } from './common.js';

// awa audit [--limit N] [--action A] [--actor WHO] [--before-id ID]: the audit trail, newest first.

export const auditOptions = {
  limit: { type: 'number' as const, description: 'audit: most records (1-1000, default 50)' },
  action: { type: 'string' as const, description: 'audit: only this action, e.g. queue.pause' },
  actor: { type: 'string' as const, description: 'audit: only records of this actor' },
  'before-id': { type: 'string' as const, description: 'audit: the page below this record id' },
};

export const AUDIT_USAGE = 'awa audit [--limit N] [--action A] [--actor WHO] [--before-id ID] [--json]';

export async function auditCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parse(argv, auditOptions);
  if (positionals.length > 0) throw new UsageError(`usage: ${AUDIT_USAGE}`);
  const limit = values.limit as number | undefined;
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 1 || limit > 1000))
    throw new UsageError(`--limit must be a whole number from 1 to 1000, got ${limit}`);
  const beforeId = values['before-id'] as string | undefined;
  if (beforeId !== undefined && !/^\d{1,19}$/.test(beforeId))
    throw new UsageError(`--before-id must be a record id (digits), got "${beforeId}"`);
  await withClient(ctx, values, async (client) => {
    const records = await client.auditLog({
      limit,
      beforeId,
      action: values.action as string | undefined,
      actor: values.actor as string | undefined,
    });
    print(
      ctx,
      values,
      records,
      records.length === 0
        ? '(no audit records)'
        : records.map((r) => ({
            id: r.id,
            at: r.at,
            actor: r.actor,
            origin: r.origin,
            action: r.action,
            target: r.target,
            detail: r.detail,
          })),
    );
  });
}
