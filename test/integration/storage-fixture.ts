import type pg from 'pg';
import type { AwaClient } from '../../src/index.js';
import { resolveSchema, type Schema, type Storage } from '../../src/storage/operations.js';
import { ringVariant, type StorageVariant } from '../conformance/variants.js';
import { sidePool } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';

/** A fresh, migrated database for one test file, with a client and a raw pool for storage calls. */
export interface StorageFixture {
  url: string;
  client: AwaClient;
  pool: pg.Pool;
  schema: Schema;
  /** The storage under test (the ring engine unless a variant is given), built for `schema`. */
  storage: Storage;
  close(): Promise<void>;
}

export async function storageFixture(
  label: string,
  variant: StorageVariant = ringVariant,
): Promise<StorageFixture> {
  const { db, client } = await migratedDatabase(label);
  const pool = sidePool(db.url, 6);
  return {
    url: db.url,
    client,
    pool,
    schema: resolveSchema(),
    storage: variant.create(resolveSchema()),
    async close() {
      await client.close();
      await pool.end();
      await db.drop();
    },
  };
}
