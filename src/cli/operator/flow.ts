import { isJobId } from '../../model/validation.js';
import type { FlowRecord } from '../../storage/index.js';
import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { parse, print, table, withClient } from './common.js';

// awa flow list [--before-id ID] [--limit N] | show ID | cancel ID: flows (docs/flows.md, "Dependencies").

export const flowOptions = {
  'before-id': { type: 'string' as const, description: 'flow list: the page below this flow id' },
  limit: { type: 'number' as const, description: 'flow list: most flows (default 50)' },
};

export const FLOW_USAGE =
  'awa flow list [--before-id ID] [--limit N] | awa flow show <id> | awa flow cancel <id>';

export async function flowCommand(argv: string[], ctx: CliContext): Promise<number | void> {
  const { positionals, values } = parse(argv, flowOptions);
  const [verb, id, ...rest] = positionals;
  const needsId = verb === 'show' || verb === 'cancel';
  if (rest.length > 0 || !(verb === 'list' ? id === undefined : needsId && id !== undefined))
    throw new UsageError(`usage: ${FLOW_USAGE}`);
  if (id !== undefined && !isJobId(id)) throw new UsageError(`"${id}" is not a flow id (digits)`);
  return withClient(ctx, values, async (client) => {
    if (verb === 'list') {
      const flows = await client.listFlows({
        beforeId: values['before-id'] as string | undefined,
        limit: values.limit as number | undefined,
      });
      return print(ctx, values, flows, table(flows));
    }
    if (verb === 'show') {
      const flow = await client.getFlow(id!);
      if (flow) return print(ctx, values, flow, showFlow(flow));
      if (values.json) ctx.out('null');
      ctx.err(`flow ${id} not found`);
      return 1;
    }
    const cancelled = await client.cancelFlow(id!);
    if (cancelled === null) {
      if (values.json) ctx.out('null');
      ctx.err(`flow ${id} not found`);
      return 1;
    }
    return print(ctx, values, { flowId: id, cancelled }, `cancelled ${cancelled} job(s) of flow ${id}`);
  });
}

/** The flow for people: a line of totals, then one row per job with what it waits on. */
function showFlow(flow: FlowRecord): string {
  const counts = Object.entries(flow.counts)
    .map(([state, n]) => `${n} ${state}`)
    .join(', ');
  const head = `flow ${flow.flowId}${flow.name ? ` (${flow.name})` : ''}: ${flow.state}; ${counts}`;
  const rows = flow.jobs.map((j) => ({
    job: j.name,
    id: j.id,
    state: j.state ?? 'past retention',
    after: j.dependsOn
      .map(
        (d) =>
          `${d.name ?? `#${d.id}`}${d.onFailure === 'fail' ? '' : `[${d.onFailure}]`}${d.outcome ? `=${d.outcome}` : ''}`,
      )
      .join(' '),
  }));
  return `${head}\n${table(rows)}`;
}
