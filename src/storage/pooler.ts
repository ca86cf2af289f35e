import { InvalidOptionError } from '../model/errors.js';
import { validateConnectionString } from './database.js';

// What sits between Awa and PostgreSQL on its main connections. A transaction-mode pooler (PgBouncer
// `pool_mode = transaction`) hands each transaction, or each statement outside one, whichever server
// connection is free, so nothing may outlive a transaction on those connections:
// - session settings (SET, set_config(…, false)): they would stay on the server connection, for whichever
//   client gets it next, and be missing from this client's next transaction. So the pools skip the
//   statement_timeout they set on a direct connection (pg's own answer deadline still bounds each call);
// - named (server-side prepared) statements: the name lives on one server connection, and another client's
//   statement of the same name on another one answers for it. So producers send unnamed statements;
// - LISTEN, session advisory locks (the maintenance leader's, migrate's): they need one session for their
//   whole life, and take a direct connection given apart (sessionConnectionString), or do without.
// Transaction-scoped things (set_config(…, true), pg_advisory_xact_lock, NOTIFY, COPY inside a transaction)
// behave the same through the pooler. Said explicitly rather than detected: a pooler answers like a server.

export type Pooler = 'none' | 'transaction';

const POOLERS: readonly Pooler[] = ['none', 'transaction'];

export function validatePooler(value: unknown): Pooler {
  if (value === undefined) return 'none';
  if (typeof value === 'string' && (POOLERS as readonly string[]).includes(value)) return value as Pooler;
  throw new InvalidOptionError(
    'pooler',
    `must be 'transaction' (connectionString leads to a transaction-mode pooler such as PgBouncer) or 'none', ` +
      `got ${typeof value === 'string' ? JSON.stringify(value) : typeof value}`,
  );
}

/** The direct connection for what needs a session of its own, when given. */
export function validateSessionConnectionString(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  return validateConnectionString(value, 'sessionConnectionString');
}

/** Whether statements may be named (prepared once per connection) on connections that lead through `pooler`. */
export function namedStatements(pooler: Pooler): boolean {
  return pooler === 'none';
}
