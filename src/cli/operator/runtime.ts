import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { ago, parse, print, withClient } from './common.js';

// awa runtime list [--all]: worker processes, their snapshot and who leads; and their descriptors.

export const runtimeOptions = {
  all: { type: 'boolean' as const, description: 'include stopped and silent processes' },
};

export async function runtimeCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parse(argv, runtimeOptions);
  const [verb, ...rest] = positionals;
  if ((verb !== 'list' && verb !== 'descriptors') || rest.length > 0) {
    throw new UsageError('usage: awa runtime list [--all] | awa runtime descriptors');
  }
  await withClient(ctx, values, async (client) => {
    if (verb === 'descriptors') {
      const ds = await client.descriptors();
      return print(
        ctx,
        values,
        ds,
        ds.map((d) => ({
          subject: d.subject,
          name: d.name,
          label: d.descriptor.label,
          owner: d.descriptor.owner,
          hosts: d.reporters,
          stale: d.stale ? 'STALE' : 'no',
          drift: d.drift ? 'DRIFT' : 'no',
          reported: ago(d.reportedAt),
        })),
      );
    }
    const all = await client.runtimeList();
    const shown = values.all ? all : all.filter((r) => r.live);
    return print(
      ctx,
      values,
      shown,
      shown.map((r) => ({
        instance: r.instanceId,
        host: `${r.hostname}:${r.pid}`,
        version: r.version,
        leader: r.isLeader ? 'LEADER' : '',
        'in flight': r.inFlight,
        queues: Object.entries(r.concurrency ?? {}).map(([q, c]) => `${q}=${c}`),
        started: ago(r.startedAt),
        heartbeat: ago(r.heartbeatAt),
        state: r.stoppedAt ? 'stopped' : r.live ? 'live' : 'silent',
      })),
    );
  });
}
