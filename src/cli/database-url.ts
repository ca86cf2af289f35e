import { UsageError, type OptionSpec, type Parsed } from './args.js';

export const DB_OPTIONS: Record<string, OptionSpec> = {
  'database-url': { type: 'string', description: 'PostgreSQL URL (default: $DATABASE_URL)' },
  schema: { type: 'string', description: 'schema Awa lives in (default: awa)' },
};

export function databaseUrl(
  values: Parsed['values'],
  env: Readonly<Record<string, string | undefined>>,
): string {
  const url = (values['database-url'] as string | undefined) ?? env.DATABASE_URL;
  if (!url) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  return url;
}
