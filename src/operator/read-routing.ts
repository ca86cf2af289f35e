import type pg from 'pg';
import {
  ClientPool,
  primaryWalPosition,
  readServerLag,
  replayedUpTo,
  validateConnectionString,
  type Pooler,
  type ReadLag,
} from '../storage/index.js';
import type { ClientOptions } from './client-options.js';

// Where a client's operator reads go (docs/deployment.md, "Read replicas"): a hot standby's pool of their own
// when the client has a readConnectionString, else the primary's. How far behind the standby is, and, after an
// action on the primary, a bounded wait for the standby to show it.

/** How long an action waits for the read replica to replay it before returning (see catchUp). */
const READ_YOUR_WRITES_MS = 2_000;

export class ReadRouting {
  /** The pool reads run on: the replica's, or the primary's own. */
  private readonly reader: ClientPool;

  constructor(
    private readonly primary: ClientPool,
    options: ClientOptions,
    pooler: Pooler,
  ) {
    this.reader =
      options.readConnectionString === undefined
        ? primary
        : new ClientPool(
            {
              ...options,
              pool: undefined,
              connectionString: validateConnectionString(
                options.readConnectionString,
                'readConnectionString',
              ),
              pooler,
            },
            'awa-client-read',
          );
  }

  get readsFrom(): 'primary' | 'replica' {
    return this.reader === this.primary ? 'primary' : 'replica';
  }

  /** A read on the replica when there is one, else on the primary. */
  read<T>(op: string, fn: (db: pg.Pool | pg.ClientBase) => Promise<T>): Promise<T> {
    return this.reader.run(op, undefined, fn);
  }

  async lag(): Promise<ReadLag> {
    if (this.reader === this.primary) return { reads: 'primary', bytesBehind: 0, lagMs: 0, replayedAt: null };
    const position = await this.primary.wrap('readLag', () => primaryWalPosition(this.primary.pool));
    return this.reader.wrap('readLag', () => readServerLag(this.reader.pool, position));
  }

  /** After an action on the primary, waits (at most READ_YOUR_WRITES_MS) for the replica to replay it, so the
   * read that follows (the dashboard's next page) shows the action. A replica further behind than that is not
   * waited for: the action stands, and lag() says how far behind the reads are. */
  async catchUp(op: string): Promise<void> {
    if (this.reader === this.primary) return;
    const position = await this.primary.wrap(op, () => primaryWalPosition(this.primary.pool));
    const deadline = Date.now() + READ_YOUR_WRITES_MS;
    while (!(await this.reader.wrap(op, () => replayedUpTo(this.reader.pool, position)))) {
      if (Date.now() >= deadline) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Ends the replica's pool (the primary's is the client's to end). */
  close(): Promise<void> {
    return this.reader === this.primary ? Promise.resolve() : this.reader.close();
  }
}
