import { AwaClient, type CronSchedule } from '../../roles.js';
import { cliActor } from '../actor.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { connectionOptions, DB_OPTIONS, POOLER_OPTIONS, READ_OPTIONS, readOptions } from '../database-url.js';
import type { CliContext } from '../io.js';

// Operator commands for cron schedules: list them with their state, pause and resume one, trigger one now,
// remove one nobody declares any more.

export const cronOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  'staleness-ms': {
    type: 'number',
    description: 'list: a worker silent this long no longer declares anything (default 30000)',
  },
  json: { type: 'boolean', description: 'print JSON' },
  ...POOLER_OPTIONS,
  ...READ_OPTIONS,
};

export const CRON_USAGE =
  'cron list | cron pause <name> | cron resume <name> | cron trigger <name> | cron remove <name>';

export async function cronCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parseArgs(argv, cronOptions);
  const [verb, name, ...extra] = positionals;
  const needsName = verb === 'pause' || verb === 'resume' || verb === 'trigger' || verb === 'remove';
  if (!(verb === 'list' && name === undefined) && !(needsName && name !== undefined && extra.length === 0)) {
    throw new UsageError(`usage: awa ${CRON_USAGE}`);
  }
  const client = new AwaClient({
    ...connectionOptions(values, ctx.env),
    ...readOptions(values, ctx.env),
    schema: values.schema as string | undefined,
    poolSize: 2,
    actor: cliActor(ctx.env),
    onAudit: () => {},
  });
  const json = values.json === true;
  const print = (v: unknown, text: string) => ctx.out(json ? JSON.stringify(v) : text);
  try {
    await client.assertMigrated();
    if (verb === 'list') {
      const schedules = await client.listCron({ stalenessMs: values['staleness-ms'] as number | undefined });
      return print(schedules, table(schedules));
    }
    const n = name!;
    if (verb === 'pause') {
      const changed = await client.pauseCron(n);
      return print({ name: n, paused: true, changed }, changed ? `paused ${n}` : `${n} was already paused`);
    }
    if (verb === 'resume') {
      const changed = await client.resumeCron(n);
      return print({ name: n, paused: false, changed }, changed ? `resumed ${n}` : `${n} was not paused`);
    }
    if (verb === 'trigger') {
      const r = await client.triggerCron(n);
      return print(
        { name: n, ...r },
        r.inserted ? `triggered ${n}: job ${r.id}` : `not enqueued: job ${r.id} holds the unique key of ${n}`,
      );
    }
    const removed = await client.removeCron(n);
    return print({ name: n, removed }, removed ? `removed ${n}` : `no schedule named ${n}`);
  } finally {
    await client.close();
  }
}

function table(rows: readonly CronSchedule[]): string {
  if (rows.length === 0) return '(no cron schedules)';
  const time = (d: Date | null) => (d ? d.toISOString() : '-');
  const cells = rows.map((s) => ({
    name: s.name,
    cron: s.cron,
    timezone: s.timezone,
    kind: s.kind,
    queue: s.queue,
    next_fire: s.paused ? 'paused' : time(s.nextFireAt),
    last_fire: time(s.lastFireAt),
    last_job: s.lastJobId ?? '-',
    declared: s.undeclared
      ? `undeclared since ${time(s.undeclaredSince)}`
      : `by ${s.declaredBy} at ${time(s.declaredAt)}`,
  }));
  const cols = Object.keys(cells[0]!) as (keyof (typeof cells)[number])[];
  const width = cols.map((c) => Math.max(c.length, ...cells.map((r) => r[c].length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(width[i]!))
      .join('  ')
      .trimEnd();
  return [line(cols), ...cells.map((r) => line(cols.map((c) => r[c])))].join('\n');
}
