import { BenchUsageError } from './args.js';

// --pooler-url: the awa system behind a transaction-mode pooler (PgBouncer `pool_mode = transaction`). Each run's
// database is reached by name through it (the pooler must forward every database: `* = host=… port=…` in
// PgBouncer's [databases]); the producers' own connections go through it too, as an application's would. What
// needs a session (LISTEN, the leader lock, migrate) stays on the run's direct URL (docs/deployment.md).

export function validatePoolerUrl(value: unknown): string {
  let url: URL;
  try {
    url = new URL(String(value));
  } catch {
    throw new BenchUsageError(`--pooler-url must be a postgres:// URL, got "${String(value)}"`);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:')
    throw new BenchUsageError(`--pooler-url must be a postgres:// URL, got "${String(value)}"`);
  return url.toString();
}

/** The database of `directUrl`, through the pooler at `poolerUrl`. */
export function throughPooler(poolerUrl: string, directUrl: string): string {
  const u = new URL(poolerUrl);
  u.pathname = new URL(directUrl).pathname;
  return u.toString();
}
