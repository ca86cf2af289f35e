import { AwaClient } from '../../runtime/index.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { databaseUrl, DB_OPTIONS } from '../database-url.js';

// Operator commands: read queue state, inspect and cancel jobs, work the dead-letter queue.

export const adminOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  queue: { type: 'string', description: 'limit to this queue (dlq list, dlq purge)' },
  limit: { type: 'number', description: 'most entries to list (default 100)' },
  'older-than-ms': { type: 'number', description: 'dlq purge: only entries older than this' },
  json: { type: 'boolean', description: 'print JSON' },
};

const USAGE =
  'awa queues | awa job get <id> | awa job cancel <id> | awa dlq list | awa dlq retry <id…> | awa dlq purge (<id…> | --older-than-ms N)';

export function adminCommand(group: 'queues' | 'job' | 'dlq') {
  return async (argv: string[]): Promise<void> => {
    const { positionals, values } = parseArgs(argv, adminOptions);
    const client = new AwaClient({
      connectionString: databaseUrl(values),
      schema: values.schema as string | undefined,
      poolSize: 2,
    });
    const print = (v: unknown) => console.log(values.json ? JSON.stringify(v) : v);
    try {
      const [verb, ...ids] = positionals;
      if (group === 'queues')
        return print(values.json ? await client.counts() : table(await client.counts()));
      if (group === 'job' && verb === 'get' && ids[0])
        return print((await client.getJob(ids[0])) ?? `job ${ids[0]} not found`);
      if (group === 'job' && verb === 'cancel' && ids[0]) {
        const from = await client.cancel(ids[0]);
        return print(from ? `cancelled (was ${from})` : 'not cancelled: already finished or unknown');
      }
      if (group === 'dlq' && verb === 'list') {
        return print(
          await client.listDlq({
            queue: values.queue as string | undefined,
            limit: values.limit as number | undefined,
          }),
        );
      }
      if (group === 'dlq' && verb === 'retry' && ids.length > 0)
        return print(`retried ${(await client.retryDlq(ids)).length}`);
      if (group === 'dlq' && verb === 'purge') {
        const older = values['older-than-ms'] as number | undefined;
        if (ids.length === 0 && older === undefined)
          throw new UsageError('dlq purge needs ids or --older-than-ms');
        const n = await client.purgeDlq(
          ids.length > 0
            ? { ids }
            : { queue: values.queue as string | undefined, before: new Date(Date.now() - older!) },
        );
        return print(`purged ${n}`);
      }
      throw new UsageError(`usage: ${USAGE}`);
    } finally {
      await client.close();
    }
  };
}

function table(rows: readonly object[]): string {
  if (rows.length === 0) return '(no queues)';
  const cols = Object.keys(rows[0]!);
  const cell = (r: object, c: string) => String((r as Record<string, unknown>)[c]);
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r, c).length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(width[i]!)).join('  ');
  return [line(cols), ...rows.map((r) => line(cols.map((c) => cell(r, c))))].join('\n');
}
