import { UsageError, type OptionSpec, type Parsed } from './args.js';

export const DB_OPTIONS: Record<string, OptionSpec> = {
  'database-url': { type: 'string', description: 'PostgreSQL URL (default: $DATABASE_URL)' },
  schema: { type: 'string', description: 'schema Awa lives in (default: awa)' },
};

/** For a database URL that leads through a transaction-mode pooler (docs/deployment.md, "Behind PgBouncer"). */
export const POOLER_OPTIONS: Record<string, OptionSpec> = {
  pooler: {
    type: 'string',
    description:
      'transaction: the database URL leads to a transaction-mode pooler (default: $AWA_POOLER, else none)',
  },
  'session-database-url': {
    type: 'string',
    description:
      'direct PostgreSQL URL for what needs a session: LISTEN, the leader lock, migrate (default: $AWA_SESSION_DATABASE_URL)',
  },
};

/** For the commands that read (operator commands, `awa serve`): a hot standby for those reads. */
export const READ_OPTIONS: Record<string, OptionSpec> = {
  'read-database-url': {
    type: 'string',
    description:
      'a streaming replica for the reads; actions still go to --database-url (default: $AWA_READ_DATABASE_URL)',
  },
};

/** The read replica option of a client, when given (the client validates it, naming readConnectionString). */
export function readOptions(
  values: Parsed['values'],
  env: Readonly<Record<string, string | undefined>>,
): { readConnectionString?: string } {
  const url = (values['read-database-url'] as string | undefined) ?? (env.AWA_READ_DATABASE_URL || undefined);
  return url === undefined ? {} : { readConnectionString: url };
}

export function databaseUrl(
  values: Parsed['values'],
  env: Readonly<Record<string, string | undefined>>,
): string {
  const url = (values['database-url'] as string | undefined) ?? env.DATABASE_URL;
  if (!url) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  return url;
}

/** The connection options of a client or host: the database URL and, when given, the pooler options (the
 * client or host validates them, naming `pooler` or `sessionConnectionString`). */
export function connectionOptions(
  values: Parsed['values'],
  env: Readonly<Record<string, string | undefined>>,
): { connectionString: string; pooler?: 'none' | 'transaction'; sessionConnectionString?: string } {
  const pooler = (values.pooler as string | undefined) ?? (env.AWA_POOLER || undefined);
  const session =
    (values['session-database-url'] as string | undefined) ?? (env.AWA_SESSION_DATABASE_URL || undefined);
  return {
    connectionString: databaseUrl(values, env),
    ...(pooler === undefined ? {} : { pooler: pooler as 'none' | 'transaction' }),
    ...(session === undefined ? {} : { sessionConnectionString: session }),
  };
}
