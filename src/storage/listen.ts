import type pg from 'pg';
import type { Schema } from './schema.js';

// The wake-up connection: a dedicated client (never shared with queries) that LISTENs for "queue got
// jobs" notifications. It is only a hint; reconnecting and polling after a loss is the runtime's job.

export async function listenForJobs(
  client: pg.ClientBase,
  schema: Schema,
  onQueue: (queue: string) => void,
): Promise<void> {
  client.on('notification', (msg) => {
    if (msg.channel === schema.jobsChannel && msg.payload) onQueue(msg.payload);
  });
  await client.query(`listen ${client.escapeIdentifier(schema.jobsChannel)}`);
}
