import type pg from 'pg';
import { InvalidOptionError } from '../model/errors.js';
import { AwaClient } from '../operator/client.js';
import { DEFAULT_SCHEMA, resolveSchema, type Queryable, type Schema } from '../storage/index.js';
import { TestSchema } from './test-schema.js';

// Where an assertion reads: a test schema or a client (what has committed), or a pg connection, which sees
// what its own open transaction wrote as well. The schema comes with the first two; a bare connection reads
// the default schema unless given one beside it.

export type EnqueuedTarget =
  | TestSchema
  | AwaClient
  /** A connection and the schema to read there: `{ client: tx, schema: t.schema }`. */
  | { client: pg.ClientBase | pg.Pool; schema: string }
  /** A bare connection (a pg.Client or PoolClient, perhaps in a transaction, or a pool): schema "awa". */
  | pg.ClientBase
  | pg.Pool;

export interface ResolvedTarget {
  db: Queryable;
  schema: Schema;
  /** How a message names it. */
  where: string;
  /** What to check when nothing of Awa's is found there. */
  hint: string;
}

const isQueryable = (value: unknown): value is Queryable =>
  typeof (value as { query?: unknown } | null)?.query === 'function';

export function resolveTarget(target: EnqueuedTarget): ResolvedTarget {
  const migrated = 'is Awa migrated there?';
  if (target instanceof TestSchema)
    return {
      db: target.client.pool,
      schema: target.client.schema,
      where: `test schema "${target.schema}"`,
      hint: 'was it dropped?',
    };
  if (target instanceof AwaClient)
    return {
      db: target.pool,
      schema: target.schema,
      where: `schema "${target.schema.name}"`,
      hint: migrated,
    };
  if (typeof target === 'object' && target !== null && 'client' in target && 'schema' in target) {
    const { client, schema } = target as { client: unknown; schema: unknown };
    // An AwaClient here (a TestSchema from another copy of the package, say) reads through its pool.
    const pool = (client as { pool?: unknown } | null)?.pool;
    const db = isQueryable(client) ? client : isQueryable(pool) ? pool : null;
    if (db === null)
      throw new InvalidOptionError('target.client', 'must be a pg client or pool (something with query())');
    const resolved = resolveSchema(schema as string);
    return {
      db,
      schema: resolved,
      where: `schema "${resolved.name}" on the given connection`,
      hint: migrated,
    };
  }
  if (isQueryable(target))
    return {
      db: target,
      schema: resolveSchema(DEFAULT_SCHEMA),
      where: `schema "${DEFAULT_SCHEMA}" on the given connection`,
      hint: `${migrated} A bare connection reads schema "${DEFAULT_SCHEMA}": pass { client, schema } for another`,
    };
  throw new InvalidOptionError(
    'target',
    'must be a TestSchema, an AwaClient, a pg client or pool, or { client, schema }',
  );
}
