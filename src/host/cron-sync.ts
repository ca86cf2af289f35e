import type pg from 'pg';
import { cronRow, type CronDefinition } from '../model/cron.js';
import type { CronSyncAction, Storage } from '../storage/index.js';

// A host declares its cron schedules when it starts: what it declares replaces what it declared before.

/** Syncs a host's schedules (even none: the host then declares nothing) and creates their queues' lanes. */
export async function syncCronDefinitions(
  db: pg.ClientBase,
  store: Storage,
  instanceId: string,
  defs: readonly CronDefinition[],
  stalenessMs: number,
): Promise<{ name: string; action: CronSyncAction }[]> {
  const rows = await Promise.all(defs.map((d) => cronRow(d)));
  await store.producer.ensureLanes(db, [...new Set(rows.map((r) => r.queue))]);
  return store.instances.cronSync(db, instanceId, rows, stalenessMs / 1000);
}
