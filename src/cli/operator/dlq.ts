import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { parse, print, withClient } from './common.js';

// awa dlq list [--queue Q] [--limit N] | retry ID… | purge (ID… | --older-than-ms N [--queue Q])

export const dlqOptions = {
  queue: { type: 'string' as const, description: 'limit to this queue (list, purge)' },
  limit: { type: 'number' as const, description: 'most entries to list (default 100)' },
  'older-than-ms': { type: 'number' as const, description: 'purge: only entries older than this' },
};

const USAGE = 'awa dlq list | awa dlq retry <id…> | awa dlq purge (<id…> | --older-than-ms N)';

export async function dlqCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parse(argv, dlqOptions);
  const [verb, ...ids] = positionals;
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
      const older = values['older-than-ms'] as number | undefined;
      if (ids.length === 0 && older === undefined)
        throw new UsageError('dlq purge needs ids or --older-than-ms');
      const n = await client.purgeDlq(
        ids.length > 0
          ? { ids }
          : { queue: values.queue as string | undefined, before: new Date(Date.now() - older!) },
      );
      return print(ctx, values, { purged: n }, `purged ${n}`);
    }
    throw new UsageError(`usage: ${USAGE}`);
  });
}
