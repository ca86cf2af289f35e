import { inspect } from 'node:util';
import { JOB_STATES, type JobState } from '../../model/job.js';
import { isJobId } from '../../model/validation.js';
import type { RetryOutcome } from '../../storage/index.js';
import { UsageError, type Parsed } from '../args.js';
import type { CliContext } from '../io.js';
import { parse, print, withClient } from './common.js';

// awa job show ID | list --state S [--queue Q] [--kind K] [--after TIME] [--before TIME] [--before-id ID] [--limit N]
// | cancel ID | retry ID
// (`job get` is show's old name.)

export const jobOptions = {
  state: { type: 'string' as const, description: `job list: one of ${JOB_STATES.join(', ')}` },
  queue: { type: 'string' as const, description: 'job list: only this queue' },
  kind: { type: 'string' as const, description: 'job list: only this kind' },
  'before-id': { type: 'string' as const, description: 'job list: the page below this id' },
  after: {
    type: 'string' as const,
    description: "job list: only jobs whose state's time is at or after this ISO time",
  },
  before: {
    type: 'string' as const,
    description: "job list: only jobs whose state's time is before this ISO time (completed: the page key)",
  },
  limit: { type: 'number' as const, description: 'job list: most jobs (default 50)' },
};

export const JOB_USAGE =
  'awa job show <id> | awa job list --state <state> [--queue Q] [--kind K] [--after TIME] [--before TIME] [--before-id ID] [--limit N] | awa job cancel <id> | awa job retry <id>';

export async function jobCommand(argv: string[], ctx: CliContext): Promise<number | void> {
  const { positionals, values } = parse(argv, jobOptions);
  const [verb, id, ...rest] = positionals;
  if (rest.length > 0 || (verb === 'list' && id !== undefined)) throw new UsageError(`usage: ${JOB_USAGE}`);
  if (id !== undefined && !isJobId(id)) throw new UsageError(`"${id}" is not a job id (digits)`);
  return withClient(ctx, values, async (client) => {
    if ((verb === 'show' || verb === 'get') && id) {
      const job = await client.getJob(id);
      if (job) return print(ctx, values, job, inspect(job, { depth: 6, colors: false }));
      // Not found is a failure a script can test for (exit 1), said on stderr; --json still prints null.
      if (values.json) ctx.out('null');
      ctx.err(`job ${id} not found`);
      return 1;
    }
    if (verb === 'cancel' && id) {
      const from = await client.cancel(id);
      return print(
        ctx,
        values,
        { id, cancelledFrom: from },
        from ? `cancelled (was ${from})` : 'not cancelled: already finished or unknown',
      );
    }
    if (verb === 'retry' && id) {
      const outcome = await client.retryJob(id);
      if (outcome.retried) return print(ctx, values, { id, ...outcome }, `retried (was ${outcome.from})`);
      // Not retried is a failure a script can test for (exit 1), with the reason on stderr.
      if (values.json) ctx.out(JSON.stringify({ id, ...outcome }));
      ctx.err(`job ${id} not retried: ${notRetried(outcome)}`);
      return 1;
    }
    if (verb === 'list' && !id) {
      const state = values.state as JobState | undefined;
      if (!state) throw new UsageError(`job list needs --state (${JOB_STATES.join(', ')})`);
      if (!(JOB_STATES as readonly string[]).includes(state))
        throw new UsageError(`--state must be one of ${JOB_STATES.join(', ')}, got "${state}"`);
      const beforeAt = time(values, 'before');
      const afterAt = time(values, 'after');
      // Swapped bounds would list nothing and look like "no such jobs": say so instead.
      if (afterAt && beforeAt && afterAt >= beforeAt)
        throw new UsageError(
          `--after (${afterAt.toISOString()}) must be earlier than --before (${beforeAt.toISOString()})`,
        );
      const jobs = await client.listJobs({
        state,
        queue: values.queue as string | undefined,
        kind: values.kind as string | undefined,
        beforeId: values['before-id'] as string | undefined,
        beforeAt,
        afterAt,
        limit: values.limit as number | undefined,
      });
      // A kind filter cannot see completed jobs kept without their kind: say so, beside the answer.
      const span =
        state === 'completed' && values.kind !== undefined
          ? await client.compactHistorySpan(values.queue as string | undefined)
          : null;
      if (span)
        ctx.err(
          `note: completed jobs closed from ${span.oldest.toISOString()} to ${span.newest.toISOString()} are kept ` +
            'without their kind (compact history): a kind filter cannot find them',
        );
      return print(ctx, values, jobs, jobs);
    }
    throw new UsageError(`usage: ${JOB_USAGE}`);
  });
}

function time(values: Parsed['values'], name: 'after' | 'before'): Date | undefined {
  const raw = values[name] as string | undefined;
  if (raw === undefined) return undefined;
  const at = new Date(raw);
  if (Number.isNaN(at.getTime())) throw new UsageError(`--${name} is not a time: ${raw}`);
  return at;
}

function notRetried(outcome: Exclude<RetryOutcome, { retried: true }>): string {
  if (outcome.reason === 'not_found') return 'no such job (or its history passed retention)';
  if (outcome.reason === 'unique_held')
    return `its unique key is held by job ${outcome.heldBy ?? '(unknown)'}; it stays ${outcome.state}`;
  return `it is ${outcome.state}; only failed, cancelled, dead-lettered, scheduled or retryable jobs are retried`;
}
