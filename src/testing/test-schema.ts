import { randomBytes } from 'node:crypto';
import { InvalidOptionError } from '../model/errors.js';
import { rejectUnknownKeys, validatePlainObject } from '../model/validation.js';
import { AwaClient, type ClientOptions } from '../operator/client.js';
import { redact, validateConnectionString, withOwnConnection, wrapDatabaseError } from '../storage/index.js';
import { dropSchema } from '../storage/testing.js';
import { TestClock } from './clock.js';

// A test's own Awa installation: a uniquely named schema on any PostgreSQL, migrated, with a client bound to it
// and a clock that moves its due times. Tests that run side by side (files in parallel, a suite's tests) each
// get one and never see each other's jobs; drop() removes that schema and nothing else.

export interface TestSchemaOptions {
  /** The server, as postgres://…. Default: DATABASE_URL. */
  connectionString?: string;
  /** Options of the schema's client (`client`). Its operator actions are audited to nowhere unless `onAudit`
   * says otherwise: a test that cancels a job should not print an audit line. */
  client?: Pick<ClientOptions, 'poolSize' | 'maxPayloadBytes' | 'queryTimeoutMs' | 'actor' | 'onAudit'>;
}

/** Longest drop() waits for a lock on the schema (a worker host still running on it) before it says so. */
const DROP_LOCK_TIMEOUT_MS = 10_000;

export class TestSchema {
  /** The schema's name, `awa_test_` and 12 random hex digits: what a WorkerHost's `schema` option takes. */
  readonly schema: string;
  readonly connectionString: string;
  /** An AwaClient bound to the schema: enqueue, getJob, listJobs, counts, callbacks… */
  readonly client: AwaClient;
  /** Moves the schema's due times (scheduled jobs, retry backoff, snoozes, callback timeouts). */
  readonly clock: TestClock;
  private dropping: Promise<void> | null = null;

  /** Use createTestSchema(): a TestSchema is made of a migrated schema. */
  constructor(connectionString: string, client: AwaClient) {
    this.connectionString = connectionString;
    this.client = client;
    this.schema = client.schema.name;
    this.clock = new TestClock(client.pool, client.schema);
  }

  /** Closes the client and drops the schema with everything in it. Safe to call more than once; every call
   * waits for the same drop. Stop the worker hosts you started on the schema first: drop waits up to 10 s for
   * their locks, then fails saying so. */
  drop(): Promise<void> {
    this.dropping ??= this.dropNow();
    return this.dropping;
  }

  /** `await using t = await createTestSchema()` drops it at the end of the block. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.drop();
  }

  private async dropNow(): Promise<void> {
    await this.client.close();
    const target = redact(this.connectionString);
    try {
      await withOwnConnection(this.connectionString, 'awa-test-drop', target, (db) =>
        dropSchema(db, this.client.schema, DROP_LOCK_TIMEOUT_MS),
      );
    } catch (err) {
      // lock_not_available: a session (a worker host still running) holds one of its tables.
      const held = (err as { code?: unknown }).code === '55P03';
      throw wrapDatabaseError(
        `Dropping test schema "${this.schema}"${held ? ' (stop the worker hosts running on it first)' : ''}`,
        err,
        target,
      );
    }
  }
}

/** Creates a uniquely named schema on the server, migrates it, and returns it with its client. Fails with
 * ConnectionError (AWA_CONNECTION_FAILED) when the server cannot be reached, and InvalidOptionError when no
 * server is named (no `connectionString`, no DATABASE_URL). */
export async function createTestSchema(options: TestSchemaOptions = {}): Promise<TestSchema> {
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options, ['connectionString', 'client']);
  const url = options.connectionString ?? process.env.DATABASE_URL;
  if (url === undefined || url === '')
    throw new InvalidOptionError(
      'connectionString',
      'is required: pass the PostgreSQL server to create test schemas on, or set DATABASE_URL',
    );
  const connectionString = validateConnectionString(url);
  const client = new AwaClient({
    onAudit: () => {},
    poolSize: 4,
    ...options.client,
    connectionString,
    schema: `awa_test_${randomBytes(6).toString('hex')}`,
  });
  try {
    await client.migrate();
  } catch (err) {
    // Migrations run one transaction each: a failure past the first leaves the versions before it, dropped
    // here. A server that cannot be reached has nothing to drop.
    if ((err as { code?: unknown }).code === 'AWA_CONNECTION_FAILED') await client.close();
    else await new TestSchema(connectionString, client).drop().catch(() => {});
    throw err;
  }
  return new TestSchema(connectionString, client);
}

/** The two hooks useTestSchema() needs: vitest's or node:test's beforeEach/afterEach (or before/after). */
export interface TestHooks {
  setup(fn: () => Promise<void>): unknown;
  teardown(fn: () => Promise<void>): unknown;
}

/**
 * A schema per test (or per suite), created by `setup` and dropped by `teardown`:
 * `const schema = useTestSchema({ setup: beforeEach, teardown: afterEach })`, then `schema()` inside a test.
 */
export function useTestSchema(hooks: TestHooks, options: TestSchemaOptions = {}): () => TestSchema {
  let current: TestSchema | null = null;
  hooks.setup(async () => {
    current = await createTestSchema(options);
  });
  hooks.teardown(async () => {
    const done = current;
    current = null;
    await done?.drop();
  });
  return () => {
    if (current === null)
      throw new InvalidOptionError(
        'useTestSchema',
        'no test schema is set up here: call the function it returned inside a test (after its setup hook ran)',
      );
    return current;
  };
}
