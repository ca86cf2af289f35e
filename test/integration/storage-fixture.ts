import type pg from 'pg';
import type { AwaClient } from '../../src/index.js';
import { resolveSchema, type Schema } from '../../src/storage/operations.js';
import { sidePool } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';

/** A fresh, migrated database for one test file, with a client and a raw pool for storage calls. */
export interface StorageFixture {
  url: string;
  client: AwaClient;
  pool: pg.Pool;
  schema: Schema;
  close(): Promise<void>;
}

export async function storageFixture(label: string): Promise<StorageFixture> {
  const { db, client } = await migratedDatabase(label);
  const pool = sidePool(db.url, 6);
  return {
    url: db.url,
    client,
    pool,
    schema: resolveSchema(),
    async close() {
      await client.close();
      await pool.end();
      await db.drop();
    },
  };
}
