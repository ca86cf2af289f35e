import { MAX_ENQUEUE_SHARDS } from '../../model/job-kind.js';
import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { ago, parse, print, withClient } from './common.js';
import { LIMITS_USAGE, limitsCommand, limitsOptionGiven, limitsOptions, limitsRequest } from './limits.js';

// awa queue list | show NAME | pause NAME | resume NAME | shards NAME COUNT | remove NAME | limits [NAME] …

export const queueOptions = {
  'window-ms': {
    type: 'number' as const,
    description: 'queue list/show: window of the recent rates (default 5 min)',
  },
  create: {
    type: 'boolean' as const,
    description:
      'queue pause/resume/shards: act on a queue nothing names yet (set one up before its first job)',
  },
  ...limitsOptions,
};

const USAGE = 'awa queue list | show NAME | pause NAME | resume NAME | shards NAME COUNT | remove NAME';

/** How many positionals each verb takes after it (no verb: list). */
const ARITY: Record<string, number> = { list: 0, show: 1, pause: 1, resume: 1, shards: 2, remove: 1 };

export async function queueCommand(argv: string[], ctx: CliContext): Promise<number | void> {
  const { positionals, values } = parse(argv, queueOptions);
  const [verb = 'list', name, ...rest] = positionals;
  const limitsOption = limitsOptionGiven(values);
  if (verb === 'limits') {
    if (positionals.length > 2) throw new UsageError(`usage: ${LIMITS_USAGE}`);
    const request = limitsRequest(name, values);
    if (values.create !== undefined && request === null)
      throw new UsageError('--create applies to queue pause, resume, shards and changing limits');
    return withClient(ctx, values, (client) => limitsCommand(client, name, request, values, ctx));
  }
  if (limitsOption) throw new UsageError(`--${limitsOption} applies to queue limits`);
  if (ARITY[verb] !== positionals.slice(1).length) throw new UsageError(`usage: ${USAGE}`);
  if (values.create !== undefined && verb !== 'pause' && verb !== 'resume' && verb !== 'shards')
    throw new UsageError('--create applies to queue pause, resume, shards and changing limits');
  const create = values.create === true;
  const count = verb === 'shards' ? shardCount(rest[0]!) : 0;
  return withClient(ctx, values, async (client) => {
    if (verb === 'list' || verb === 'show') {
      const windowMs = values['window-ms'] as number | undefined;
      const all = await client.queueHealth({ windowMs });
      const rows = verb === 'show' ? all.filter((q) => q.queue === name) : all;
      if (verb === 'show' && rows.length === 0) {
        // Not found is a failure a script can test for (exit 1), said on stderr; --json still prints null.
        if (values.json) ctx.out('null');
        ctx.err(`queue ${name} not found`);
        return 1;
      }
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
      const pause = verb === 'pause';
      const changed = pause
        ? await client.pauseQueue(name, { create })
        : await client.resumeQueue(name, { create });
      // The queue's state now, and separately whether this call changed it (as cron pause --json says).
      return print(
        ctx,
        values,
        { queue: name, paused: pause, changed },
        changed
          ? `${pause ? 'paused' : 'resumed'} ${name}`
          : `${name} was already ${pause ? 'paused' : 'running'}`,
      );
    }
    if (verb === 'remove' && name) {
      const { history } = await client.removeQueue(name);
      return print(
        ctx,
        values,
        { queue: name, removed: true, history },
        history > 0
          ? `removed ${name} (its ${history} failed or cancelled jobs stay listed until retention deletes them)`
          : `removed ${name}`,
      );
    }
    if (verb === 'shards' && name) {
      const before = await client.setEnqueueShards(name, count, { create });
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

function shardCount(raw: string): number {
  const count = Number(raw);
  if (!Number.isInteger(count) || count < 1 || count > MAX_ENQUEUE_SHARDS)
    throw new UsageError(
      `shards: COUNT must be a whole number from 1 to ${MAX_ENQUEUE_SHARDS}, got "${raw}"`,
    );
  return count;
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
