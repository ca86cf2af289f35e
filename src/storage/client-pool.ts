import type pg from 'pg';
import { ClientClosedError } from '../model/errors.js';
import { validateInt } from '../model/validation.js';
import {
  createPool,
  listenFromBirth,
  QUERY_TIMEOUT_MS,
  redact,
  validateConnectionString,
  wrapDatabaseError,
} from './database.js';
import type { Pooler } from './pooler.js';

// The pool behind a client handle (producers, operator reads): the caller's pool, or one of its own made from a
// connection string. Every call through it fails with ClientClosedError once it is closed, and with a typed
// error naming the target (never the password) when the database refuses or goes away.

export interface ClientPoolOptions {
  connectionString?: string;
  pool?: pg.Pool;
  poolSize?: number;
  queryTimeoutMs?: number;
  /** What connectionString leads through (validated by the caller): see pooler.ts. */
  pooler?: Pooler;
}

export class ClientPool {
  readonly pool: pg.Pool;
  /** The connection string the pool was made from; null for a pool passed in. */
  readonly url: string | null;
  /** Where the pool points, as error messages name it. */
  readonly target: string;
  /** What the pool's connections lead through (pooler.ts); 'none' for a pool passed in unless told. */
  readonly pooler: Pooler;
  private readonly ownsPool: boolean;
  private closing: Promise<void> | null = null;

  constructor(options: ClientPoolOptions, applicationName: string) {
    this.pooler = options.pooler ?? 'none';
    if (options.pool) {
      this.pool = options.pool;
      listenFromBirth(this.pool);
      this.ownsPool = false;
      this.url = null;
      this.target = 'the given pool';
      return;
    }
    const url = validateConnectionString(options.connectionString);
    const size = options.poolSize === undefined ? 10 : validateInt('poolSize', options.poolSize, 1, 1000);
    const queryTimeoutMs =
      options.queryTimeoutMs === undefined
        ? QUERY_TIMEOUT_MS.dflt
        : validateInt('queryTimeoutMs', options.queryTimeoutMs, QUERY_TIMEOUT_MS.min, QUERY_TIMEOUT_MS.max);
    this.pool = createPool(url, size, applicationName, queryTimeoutMs, options.pooler !== 'transaction');
    this.ownsPool = true;
    this.url = url;
    this.target = redact(url);
  }

  /** Runs `fn` on `client` when given (the caller's transaction), else on the pool. */
  run<T>(
    op: string,
    client: pg.ClientBase | undefined,
    fn: (db: pg.Pool | pg.ClientBase) => Promise<T>,
  ): Promise<T> {
    return this.wrap(op, () => fn(client ?? this.pool));
  }

  async wrap<T>(op: string, fn: () => Promise<T>): Promise<T> {
    if (this.closing) throw new ClientClosedError(op);
    try {
      return await fn();
    } catch (err) {
      throw wrapDatabaseError(op, err, this.target);
    }
  }

  /** Ends a pool of its own (a pool passed in stays the caller's). Every call waits for the same end. */
  close(): Promise<void> {
    this.closing ??= this.ownsPool ? this.pool.end() : Promise.resolve();
    return this.closing;
  }
}
