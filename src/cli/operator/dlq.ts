import { isJobId } from '../../model/validation.js';
import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { parse, print, withClient } from './common.js';

// awa dlq list [--queue Q] [--limit N] | retry ID… | purge (ID… | --older-than-ms N [--queue Q])

export const dlqOptions = {
  queue: { type: 'string' as const, description: 'limit to this queue (list, purge)' },
  limit: { type: 'number' as const, description: 'most entries to list (default 100)' },
  'older-than-ms': {
    type: 'number' as const,
    description: 'purge: only entries that went to the DLQ more than this many ms ago (a whole number > 0)',
  },
  'dry-run': { type: 'boolean' as const, description: 'purge: print how many would go, delete nothing' },
  yes: { type: 'boolean' as const, description: 'purge: confirm a purge across every queue' },
};

const USAGE =
  'awa dlq list | awa dlq retry <id…> | awa dlq purge (<id…> | --older-than-ms N [--queue Q]) [--dry-run] [--yes]';

export async function dlqCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parse(argv, dlqOptions);
  const [verb, ...ids] = positionals;
  if (verb === 'list' && ids.length > 0) throw new UsageError(`usage: ${USAGE}`);
  await withClient(ctx, values, async (client) => {
    if (verb === 'list') {
      const entries = await client.listDlq({
        queue: values.queue as string | undefined,
        limit: values.limit as number | undefined,
      });
      return print(
        ctx,
        values,
        entries,
        entries.map((e) => ({
          id: e.id,
          queue: e.queue,
          kind: e.kind,
          attempt: `${e.attempt}/${e.maxAttempts}`,
          at: e.dlqAt,
          reason: e.reason,
        })),
      );
    }
    if (verb === 'retry' && ids.length > 0) {
      const moved = await client.retryDlq(ids);
      return print(ctx, values, { retried: moved }, `retried ${moved.length}`);
    }
    if (verb === 'purge') {
      const target = purgeTarget(ids, values);
      if (values['dry-run']) {
        const n = await client.purgeDlq(target, { dryRun: true });
        return print(
          ctx,
          values,
          { wouldPurge: n, dryRun: true },
          `would purge ${n} (dry run: nothing deleted)`,
        );
      }
      const n = await client.purgeDlq(target);
      return print(ctx, values, { purged: n }, `purged ${n}`);
    }
    throw new UsageError(`usage: ${USAGE}`);
  });
}

/** What a purge deletes: the ids given, or entries older than a positive age, of one queue or (confirmed with
 * --yes) of every queue. A zero or negative age would reach every entry, so it is refused. */
function purgeTarget(
  ids: string[],
  values: Record<string, unknown>,
): { ids: string[] } | { queue?: string; before: Date } {
  const older = values['older-than-ms'] as number | undefined;
  if (ids.length > 0) {
    if (older !== undefined) throw new UsageError('dlq purge takes ids or --older-than-ms, not both');
    const bad = ids.find((id) => !isJobId(id));
    if (bad !== undefined) throw new UsageError(`dlq purge: "${bad}" is not a job id`);
    return { ids };
  }
  if (older === undefined) throw new UsageError('dlq purge needs ids or --older-than-ms');
  if (!Number.isInteger(older) || older < 1)
    throw new UsageError(`--older-than-ms must be a whole number of milliseconds above 0, got ${older}`);
  const queue = values.queue as string | undefined;
  if (queue === undefined && !values.yes && !values['dry-run'])
    throw new UsageError(
      'dlq purge without --queue purges every queue: add --yes to confirm (or --dry-run first)',
    );
  return { queue, before: new Date(Date.now() - older) };
}
