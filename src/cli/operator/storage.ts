import { UsageError } from '../args.js';
import type { CliContext } from '../io.js';
import { parse, print, table as tableOf, withClient } from './common.js';

// awa storage status: the ring's slots (oldest first) and what holds the oldest, then table sizes and tuples.

export async function storageCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parse(argv);
  if (positionals[0] !== 'status' || positionals.length > 1)
    throw new UsageError('usage: awa storage status');
  await withClient(ctx, values, async (client) => {
    const [ring, tables] = await Promise.all([client.ringStatus(), client.storageStatus()]);
    const oldest = ring.find((s) => s.role === 'sealed');
    const held = oldest?.pinnedBy
      ? `oldest sealed slot ${oldest.slot} is held by ${oldest.pinnedBy} (${oldest.unclaimedMore ? 'more than ' : ''}${oldest.unclaimed ?? 0} unclaimed rows, ${oldest.openReceipts ?? 0} open receipts) of queues ${oldest.queues?.join(', ') || '-'}`
      : 'nothing holds the ring: the oldest slot is pruned as soon as it is spent';
    return print(
      ctx,
      values,
      { ring, tables },
      [
        'ring',
        tableOf(
          ring.map((s) => ({
            slot: s.slot,
            role: s.role,
            generation: s.generation,
            'ready rows≈': s.readyRows,
            'receipts≈': s.receipts,
            'held by': s.pinnedBy ?? '',
          })),
        ),
        held,
        '',
        'tables',
        tableOf(
          tables.map((t) => ({
            table: t.family,
            partitions: t.partitions,
            size: mib(t.bytes),
            live: t.liveTuples,
            dead: t.deadTuples,
          })),
        ),
      ].join('\n'),
    );
  });
}

function mib(bytes: number): string {
  return bytes < 1_048_576 ? `${(bytes / 1024).toFixed(0)} KiB` : `${(bytes / 1_048_576).toFixed(1)} MiB`;
}
