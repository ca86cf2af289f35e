import pg from 'pg';
import {
  ConnectionError,
  DatabaseError,
  DatabaseReadOnlyError,
  DatabaseUnresponsiveError,
  InvalidOptionError,
  TransactionRequiredError,
} from '../model/errors.js';

// Connection handling: one place that builds pools and turns driver failures into typed errors.

export type Queryable = pg.Pool | pg.ClientBase;

export interface ConnectionOptions {
  /** postgres://user:pass@host:port/db */
  connectionString?: string;
  /** An existing pool to use; Awa will not end it. */
  pool?: pg.Pool;
  /** Pool size when Awa creates the pool. */
  max?: number;
}

export function validateConnectionString(value: unknown, field = 'connectionString'): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new InvalidOptionError(
      field,
      field === 'connectionString'
        ? 'is required (or pass `pool`); set DATABASE_URL or pass it'
        : 'must be a non-empty postgres:// URL',
    );
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidOptionError(field, `is not a URL: ${redact(value)}`);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new InvalidOptionError(
      field,
      `must start with postgres:// or postgresql://, got ${url.protocol}//`,
    );
  }
  return value;
}

/**
 * TCP keepalive starts probing a connection after this much silence. pg's `keepAlive: true` alone leaves the
 * kernel's default, two hours: long enough for a NAT gateway or load balancer to forget an idle LISTEN or
 * leader connection (AWS NAT gateways after 350 s, Azure's after 4 min), after which it is dead without
 * either side knowing, and for a peer that vanished to go unnoticed. A probe after 30 s keeps such a flow
 * alive, and a dead peer is found by the kernel's probes that follow (9 × 75 s by default).
 */
export const KEEPALIVE_IDLE_MS = 30_000;

/**
 * `queryTimeoutMs` bounds every statement on the connection, twice over:
 * - the server cancels a statement that runs longer (statement_timeout, set when the connection opens): a
 *   statement stuck behind someone's lock, say, fails cleanly, and the connection stays usable;
 * - pg fails a statement still unanswered a little later (query_timeout, answerDeadlineMs()): the server has
 *   said nothing at all. Without it a statement sent into a connection that has silently died (a failover
 *   that left the old address black-holed, a frozen server, a dropped route) waits for TCP to give up, 15
 *   minutes or more while data is unacknowledged, and for ever when something between still acknowledges it.
 *   A statement failed this way is a connection loss (isConnectionLoss): whoever holds the client must
 *   discard it, as pg leaves the connection mid-statement.
 * The server's bound comes first so that a live server never has statements abandoned on it: each would keep a
 * backend (waiting on its lock) after the client had gone, and enough of them use up max_connections.
 */
export function answerDeadlineMs(queryTimeoutMs: number): number {
  return queryTimeoutMs + Math.min(5_000, Math.ceil(queryTimeoutMs / 2));
}

/** Sets the server-side bound of createPool()'s `queryTimeoutMs` on a session. */
export async function boundStatements(client: pg.ClientBase, queryTimeoutMs: number): Promise<void> {
  await client.query(`select set_config('statement_timeout', $1, false)`, [
    `${Math.round(queryTimeoutMs)}ms`,
  ]);
}

/**
 * A pool of `max` connections. `sessionSettings: false` (connections that lead through a transaction-mode
 * pooler: see pooler.ts) leaves out the statement_timeout set on each new connection, which there would land on
 * one server connection shared with other clients; pg's answer deadline still bounds every statement.
 */
export function createPool(
  connectionString: string,
  max: number,
  applicationName = 'awa',
  queryTimeoutMs?: number,
  sessionSettings = true,
): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    application_name: applicationName,
    connectionTimeoutMillis: 10_000,
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
    ...(queryTimeoutMs === undefined
      ? {}
      : {
          query_timeout: answerDeadlineMs(queryTimeoutMs),
          // pg-pool runs it on each new connection before handing it out (a failure fails that checkout).
          ...(sessionSettings
            ? { onConnect: (client: pg.ClientBase) => boundStatements(client, queryTimeoutMs) }
            : {}),
        }),
  });
  // An idle client that loses its server emits 'error' on the pool; without a listener that would crash
  // the process. The next checkout simply gets a fresh connection.
  pool.on('error', () => {});
  listenFromBirth(pool);
  return pool;
}

const listeningFromBirth = new WeakSet<pg.Pool>();

/**
 * Makes every client `pool` connects from now on listen for errors from its first moment. A new connection
 * can be ended by the server in the very read that completes its start-up (a backend terminated as it
 * connects: pg_terminate_backend, DROP DATABASE … WITH (FORCE), a failover). Its client then emits 'error'
 * after the pool stopped listening and before whoever checked it out could start: an unhandled 'error' event,
 * which ends the process. With a listener from birth, the lost client fails its next query instead (a
 * connection loss) and the pool discards it on release. Also applied to a pool the user passes in: it only
 * adds a listener. Once per pool.
 */
export function listenFromBirth(pool: pg.Pool): void {
  if (listeningFromBirth.has(pool)) return;
  listeningFromBirth.add(pool);
  pool.on('connect', (client) => client.on('error', () => {}));
}

/** A client of its own (LISTEN, leadership); `queryTimeoutMs` as for createPool (pg's half: the caller runs
 * boundStatements() once connected). */
export function createClient(
  connectionString: string,
  applicationName = 'awa',
  queryTimeoutMs?: number,
): pg.Client {
  return new pg.Client({
    connectionString,
    application_name: applicationName,
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
    connectionTimeoutMillis: 10_000,
    ...(queryTimeoutMs === undefined ? {} : { query_timeout: answerDeadlineMs(queryTimeoutMs) }),
  });
}

/**
 * Runs `fn` on a connection opened for it alone and closed after, with no statement bound: for work that may
 * legitimately take long (migrations build indexes and wait for another migrator's lock).
 */
export async function withOwnConnection<T>(
  connectionString: string,
  applicationName: string,
  target: string,
  fn: (client: pg.ClientBase) => Promise<T>,
): Promise<T> {
  const client = createClient(connectionString, applicationName);
  // A connection lost between statements fails the next one instead of raising an unhandled 'error'.
  client.on('error', () => {});
  try {
    await client.connect();
  } catch (err) {
    await client.end().catch(() => {});
    throw new ConnectionError(target, err);
  }
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Checks out a client, mapping a failed connect to ConnectionError. */
export async function connect(pool: pg.Pool, target: string): Promise<pg.PoolClient> {
  try {
    return await pool.connect();
  } catch (err) {
    throw new ConnectionError(target, err);
  }
}

/**
 * Runs `fn` on a client checked out of `pool`, then gives it back. While a client is checked out, pg-pool
 * leaves it without an 'error' listener; a connection lost meanwhile (the server terminated the backend, a
 * reset socket) makes it emit 'error' outside any query, typically an ECONNRESET right after the server's own
 * error ended the query, and an 'error' event nobody listens to is an uncaught exception that ends the
 * caller's process. So the checkout listens for the whole of `fn`, and a client that lost its connection is
 * released as broken (the pool discards it instead of handing it out again).
 */
export async function withClient<T>(
  pool: pg.Pool,
  target: string,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await connect(pool, target);
  let lost: Error | undefined;
  const onError = (err: Error) => (lost ??= err);
  client.on('error', onError);
  let failure: unknown;
  try {
    return await fn(client);
  } catch (err) {
    failure = err;
    throw err;
  } finally {
    client.release(
      lost ?? (isConnectionLoss(failure) || needsNewConnection(failure) ? (failure as Error) : undefined),
    );
    client.removeListener('error', onError);
  }
}

/** Runs `fn` in a transaction on a pooled client. */
export async function withTransaction<T>(
  pool: pg.Pool,
  target: string,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  return withClient(pool, target, async (client) => {
    await client.query('begin');
    try {
      const result = await fn(client);
      await client.query('commit');
      return result;
    } catch (err) {
      // A lost connection has no transaction left to roll back, and one that stopped answering would make
      // the rollback wait out a second query timeout.
      if (!isConnectionLoss(err)) await client.query('rollback').catch(() => {});
      throw err;
    }
  });
}

/**
 * Runs `fn` inside the caller's open transaction, under a savepoint: a failure rolls back what `fn` wrote and
 * leaves the caller's transaction usable. Refuses a client that has no open transaction.
 */
export async function withSavepoint<T>(
  client: pg.ClientBase,
  operation: string,
  fn: (client: pg.ClientBase) => Promise<T>,
): Promise<T> {
  try {
    await client.query('savepoint awa_load');
  } catch (err) {
    // no_active_sql_transaction: SAVEPOINT outside a transaction block.
    if ((err as { code?: string }).code === '25P01') throw new TransactionRequiredError(operation);
    throw err;
  }
  try {
    const result = await fn(client);
    await client.query('release savepoint awa_load');
    return result;
  } catch (err) {
    await client.query('rollback to savepoint awa_load; release savepoint awa_load').catch(() => {});
    throw err;
  }
}

/** True when PostgreSQL refused a statement because the session cannot write (25006 read_only_sql_transaction):
 * it reached a standby ("cannot execute … during recovery"), or a session or transaction set read-only. Nothing
 * was written. The connection is alive but useless for the queue: after a failover it still leads to the old
 * server, and its session keeps the setting it started with, so only a new connection can reach a writable one. */
export function isReadOnly(err: unknown): err is Error {
  return err instanceof Error && (err as { code?: unknown }).code === '25006';
}

/** True when the connection a statement failed on must be given up for a new one: it stopped answering, or it
 * cannot write (isReadOnly). A plain connection loss needs no verdict: the connection is gone already. */
export function needsNewConnection(err: unknown): err is Error {
  return isUnanswered(err) || isReadOnly(err);
}

/** The typed error for a failure that is about the server rather than the statement (it stopped answering, it
 * cannot write); any other error as it is. */
export function serverFault(err: unknown): unknown {
  if (isUnanswered(err)) return new DatabaseUnresponsiveError(err);
  if (isReadOnly(err)) return new DatabaseReadOnlyError(err);
  return err;
}

/** True when pg gave up waiting for a statement's answer (query_timeout: see createPool). */
export function isUnanswered(err: unknown): err is Error {
  return err instanceof Error && err.message === 'Query read timeout';
}

/** True for errors that mean "the connection or server went away", worth a retry after reconnecting. */
export function isConnectionLoss(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  if (!e) return false;
  if (isUnanswered(err)) return true;
  if (e.code && /^(08|57P0[1-3])/.test(e.code)) return true;
  if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET' || e.code === 'EPIPE' || e.code === 'ETIMEDOUT')
    return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|not queryable/i.test(
    e.message ?? '',
  );
}

/** True when PostgreSQL refused a statement for the data it was given (SQLSTATE class 22: bad encoding,
 * text jsonb cannot hold, a value out of range): retrying the same data cannot help. */
export function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.length === 5 && code.startsWith('22');
}

/** Leaves Awa's own errors alone; a server fault becomes its typed error (serverFault), a lost or refused
 * connection ConnectionError, the rest DatabaseError. */
export function wrapDatabaseError(operation: string, err: unknown, target = 'the database'): Error {
  if (err instanceof Error && 'code' in err && typeof (err as { code: unknown }).code === 'string') {
    const code = (err as { code: string }).code;
    if (code.startsWith('AWA_')) return err;
  }
  const fault = serverFault(err);
  if (fault !== err) return fault as Error;
  if (isConnectionLoss(err)) return new ConnectionError(target, err);
  return new DatabaseError(operation, err);
}

export function redact(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
}

const DAY = 86_400_000;
/** The statement bound of every pool Awa makes (hosts and clients validate their option against this range). */
export const QUERY_TIMEOUT_MS = { dflt: 30_000, min: 1_000, max: DAY } as const;
