import { AwaClient } from '../../roles.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { databaseUrl, DB_OPTIONS } from '../database-url.js';
import type { CliContext } from '../io.js';

export const migrateOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  sql: { type: 'boolean', description: 'print the SQL instead of running it' },
};

export async function migrateCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parseArgs(argv, migrateOptions);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const schema = values.schema as string | undefined;
  if (values.sql) {
    // Printing needs no database; a placeholder URL keeps the client's validation happy.
    const client = new AwaClient({ connectionString: 'postgres://localhost/unused', schema });
    ctx.write(client.migrationSql());
    await client.close();
    return;
  }
  const client = new AwaClient({ connectionString: databaseUrl(values, ctx.env), schema, poolSize: 1 });
  try {
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
