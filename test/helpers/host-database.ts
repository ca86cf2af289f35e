import { AwaClient, type WorkerHost, type WorkerOptions } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from './database.js';

// The setup most host tests share: a database of the file's own with the schema migrated and a client on it,
// the hosts a test started stopped after it, and both closed and dropped at the end.

/** Host timings for tests that run jobs: quick polls, promotion and elections; completed history kept, so
 * getJob() finds the jobs a test just ran; a bounded stop. */
export const QUICK_HOST: Partial<WorkerOptions> = {
  pollIntervalMs: 20,
  promoteIntervalMs: 20,
  leaderElectionIntervalMs: 50,
  completedRetentionMs: 3_600_000,
  shutdownTimeoutMs: 5_000,
};

export async function migratedDatabase(
  label: string,
  clientOptions: { poolSize?: number } = {},
): Promise<{ db: TestDatabase; client: AwaClient }> {
  const db = await createTestDatabase(label);
  const client = new AwaClient({ connectionString: db.url, ...clientOptions });
  await client.migrate();
  return { db, client };
}

/** Stops every host in `hosts` and empties it. */
export async function stopHosts(hosts: WorkerHost[]): Promise<void> {
  await Promise.all(hosts.splice(0).map((h) => h.stop()));
}

/** Closes the client and drops the database (either may be missing when setup failed). */
export async function closeDatabase(
  client: AwaClient | undefined,
  db: TestDatabase | undefined,
): Promise<void> {
  await client?.close();
  await db?.drop();
}
