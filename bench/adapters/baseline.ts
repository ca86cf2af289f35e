import pg from 'pg';
import type { BenchArgs, SystemAdapter } from '../adapter.js';

// Not a queue: a plain INSERT of one row into an ordinary table, on the caller's transaction. It gives
// the ceiling this machine allows for the "begin, write one row, hold, commit" pattern of the producers
// scenario, against which the queues' in-transaction enqueue is read. It runs in no other scenario.

const TABLE = 'jobs';

export class BaselineAdapter implements SystemAdapter {
  readonly label = 'baseline';
  readonly schema = 'bench_baseline';
  private pool: pg.Pool | null = null;

  async setup(url: string): Promise<void> {
    this.pool = new pg.Pool({ connectionString: url, max: 2 });
    await this.pool.query(`create schema ${this.schema}`);
    // About what a job row is: an identity, the args, a creation time.
    await this.pool.query(
      `create table ${this.schema}.${TABLE} (
         id bigint generated always as identity primary key,
         args jsonb not null,
         created_at timestamptz not null default now())`,
    );
  }

  async enqueueInTransaction(client: pg.ClientBase, args: BenchArgs): Promise<void> {
    await client.query(`insert into ${this.schema}.${TABLE} (args) values ($1)`, [JSON.stringify(args)]);
  }

  async pending(): Promise<number> {
    const { rows } = await this.db().query<{ n: number }>(
      `select count(*)::int as n from ${this.schema}.${TABLE}`,
    );
    return rows[0]!.n;
  }

  async depth(): Promise<number> {
    return this.pending();
  }

  async maintenance(): Promise<Record<string, number>> {
    return {};
  }

  settings(): Record<string, unknown> {
    return {
      inTransaction: `insert into ${this.schema}.${TABLE} (args) values ($1) on the caller's client`,
      table: 'id bigint identity primary key, args jsonb, created_at timestamptz default now()',
    };
  }

  async stop(): Promise<void> {
    const pool = this.pool;
    this.pool = null;
    await pool?.end();
  }

  enqueueBulk(): Promise<void> {
    return this.notAQueue();
  }

  enqueueBulkInTransaction(): Promise<void> {
    return this.notAQueue();
  }

  enqueueBatch(): Promise<void> {
    return this.notAQueue();
  }

  enqueueOne(): Promise<void> {
    return this.notAQueue();
  }

  startWorkers(): Promise<void> {
    return this.notAQueue();
  }

  private notAQueue(): Promise<never> {
    return Promise.reject(new Error('baseline is not a queue: it runs in the producers scenario only'));
  }

  private db(): pg.Pool {
    if (!this.pool) throw new Error('baseline adapter used before setup()');
    return this.pool;
  }
}
