import { AwaClient } from '../../roles.js';
import type { MigrationPlan } from '../../storage/index.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { connectionOptions, DB_OPTIONS, POOLER_OPTIONS } from '../database-url.js';
import type { CliContext } from '../io.js';

export const migrateOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  ...POOLER_OPTIONS,
  sql: { type: 'boolean', description: 'print the SQL instead of running it' },
  check: {
    type: 'boolean',
    description:
      'change nothing: say what would run and whether the hosts running now keep working (exit 4 when not)',
  },
  'live-ms': { type: 'number', description: 'check: a host silent this long is not running (default 30000)' },
  json: { type: 'boolean', description: 'check: print JSON' },
};

/** `migrate --check` exits with this when a running host would be left behind. */
export const EXIT_HOSTS_INCOMPATIBLE = 4;

export async function migrateCommand(argv: string[], ctx: CliContext): Promise<number | void> {
  const { positionals, values } = parseArgs(argv, migrateOptions);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.sql && values.check) throw new UsageError('give --sql or --check, not both');
  const schema = values.schema as string | undefined;
  if (values.sql) {
    // Printing needs no database; a placeholder URL keeps the client's validation happy.
    const client = new AwaClient({ connectionString: 'postgres://localhost/unused', schema });
    ctx.write(client.migrationSql());
    await client.close();
    return;
  }
  const client = new AwaClient({ ...connectionOptions(values, ctx.env), schema, poolSize: 1 });
  try {
    if (values.check) {
      const plan = await client.migrationPlan({ liveMs: values['live-ms'] as number | undefined });
      if (values.json) ctx.out(JSON.stringify(plan));
      else for (const line of describePlan(plan)) ctx.out(line);
      return plan.compatible ? 0 : EXIT_HOSTS_INCOMPATIBLE;
    }
    const result = await client.migrate();
    const name = client.schema.name;
    ctx.out(
      result.applied.length > 0
        ? `migrated schema "${name}" from version ${result.from} to ${result.to}`
        : result.functions
          ? `schema "${name}" is at version ${result.to}; installed this build's functions`
          : `schema "${name}" is up to date (version ${result.to})`,
    );
  } finally {
    await client.close();
  }
}

function describePlan(plan: MigrationPlan): string[] {
  const lines = [`schema "${plan.schema}" is at version ${plan.from}; this build is at version ${plan.to}`];
  if (plan.pending.length === 0) lines.push('no migration to apply');
  for (const m of plan.pending) {
    const verdict = m.rolling.safe === true ? 'safe under running hosts' : 'stop the hosts before it first';
    lines.push(`would apply ${String(m.version).padStart(3, '0')}_${m.name}: ${verdict} (${m.rolling.why})`);
  }
  lines.push(
    plan.functions ? "would install this build's functions" : "this build's functions are installed",
  );
  if (plan.hosts.length === 0) lines.push('no host is running');
  for (const h of plan.hosts) {
    lines.push(
      `host ${h.hostname}:${h.pid} (${h.instanceId}, ${h.version ?? 'version unknown'}) built for version ` +
        `${h.builtFor}: ${h.compatible ? 'keeps working' : 'would be left behind: stop it before migrating'}`,
    );
  }
  lines.push(
    plan.compatible
      ? 'compatible: the running hosts keep working through this migration'
      : 'not compatible: stop the hosts named above, then migrate',
  );
  return lines;
}
