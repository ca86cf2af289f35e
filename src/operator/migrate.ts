import type { MigrateResult } from '../storage/index.js';
import { AwaClient } from './client.js';

export interface MigrateOptions {
  connectionString?: string;
  schema?: string;
}

/** Applies pending migrations (advisory-locked, safe to run concurrently) and closes its connection. */
export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const client = new AwaClient({ ...options, poolSize: 1 });
  try {
    return await client.migrate();
  } finally {
    await client.close();
  }
}
