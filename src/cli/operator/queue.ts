import { MAX_ENQUEUE_SHARDS } from '../../model/job-kind.js';
import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { ago, parse, print, withClient } from './common.js';

// awa queue list | show NAME | pause NAME | resume NAME | shards NAME COUNT

export const queueOptions = {
  'window-ms': {
    type: 'number' as const,
    description: 'queue list/show: window of the recent rates (default 5 min)',
  },
};

const USAGE = 'awa queue list | show NAME | pause NAME | resume NAME | shards NAME COUNT';

export async function queueCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parse(argv, queueOptions);
  const [verb, name, ...rest] = positionals;
  if (rest.length > (verb === 'shards' ? 1 : 0)) throw new UsageError(`usage: ${USAGE}`);
  await withClient(ctx, values, async (client) => {
    if (verb === 'list' || verb === undefined || verb === 'show') {
      if (verb === 'show' && !name) throw new UsageError(`usage: ${USAGE}`);
      const windowMs = values['window-ms'] as number | undefined;
      const all = await client.queueHealth({ windowMs });
      const rows = verb === 'show' ? all.filter((q) => q.queue === name) : all;
      if (verb === 'show' && rows.length === 0) throw new UsageError(`no queue "${name}"`);
      return print(
        ctx,
        values,
        verb === 'show' ? rows[0] : rows,
        rows.map((q) => ({
          queue: q.queue,
          state: q.paused ? 'paused' : 'running',
          available: q.available,
          running: q.running,
          waiting: q.waiting,
          scheduled: q.scheduled,
          retryable: q.retryable,
          completed: q.completed,
          failed: q.failed,
          cancelled: q.cancelled,
          'done/window': q.completedRecent,
          'failed/window': q.failedRecent,
          'oldest age': ago(q.oldestAvailableAt),
          'in oldest slot': q.inOldestSlot ? 'yes' : 'no',
          shards: q.enqueueShards,
        })),
      );
    }
    if ((verb === 'pause' || verb === 'resume') && name) {
      const changed = verb === 'pause' ? await client.pauseQueue(name) : await client.resumeQueue(name);
      const word = verb === 'pause' ? 'paused' : 'resumed';
      return print(
        ctx,
        values,
        { queue: name, [word]: changed },
        changed ? `${word} ${name}` : `${name} was already ${verb === 'pause' ? 'paused' : 'running'}`,
      );
    }
    if (verb === 'shards' && name && rest.length === 1) {
      const count = Number(rest[0]);
      if (!Number.isInteger(count) || count < 1 || count > MAX_ENQUEUE_SHARDS)
        throw new UsageError(
          `shards: COUNT must be a whole number from 1 to ${MAX_ENQUEUE_SHARDS}, got "${rest[0]}"`,
        );
      const before = await client.setEnqueueShards(name, count);
      return print(
        ctx,
        values,
        { queue: name, enqueueShards: count, before },
        `${name}: ${before} -> ${count} enqueue shards`,
      );
    }
    throw new UsageError(`usage: ${USAGE}`);
  });
}

/** awa queues: the per-queue counts (the shorter, older view). */
export async function queuesCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parse(argv);
  if (positionals.length > 0) throw new UsageError('usage: awa queues [--json]');
  await withClient(ctx, values, async (client) => {
    const counts = await client.counts();
    print(ctx, values, counts, counts.length === 0 ? '(no queues)' : counts);
  });
}
