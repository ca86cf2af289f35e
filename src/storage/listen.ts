import type pg from 'pg';
import { cancelChannel, parseCancelPayload } from './cancel.js';
import type { Schema } from './schema.js';

// The wake-up connection: a dedicated client (never shared with queries) that LISTENs for "queue got
// jobs" and "abort this attempt" notifications. Both are hints: polling and the fence stay the truth;
// reconnecting after a loss is the runtime's job.

export interface Notifications {
  onQueue(queue: string): void;
  onCancel(jobId: string, runLease: number): void;
}

export async function listenForJobs(client: pg.ClientBase, schema: Schema, on: Notifications): Promise<void> {
  const cancel = cancelChannel(schema);
  client.on('notification', (msg) => {
    if (!msg.payload) return;
    if (msg.channel === schema.jobsChannel) on.onQueue(msg.payload);
    else if (msg.channel === cancel) {
      const target = parseCancelPayload(msg.payload);
      if (target) on.onCancel(target.jobId, target.runLease);
    }
  });
  await client.query(
    `listen ${client.escapeIdentifier(schema.jobsChannel)}; listen ${client.escapeIdentifier(cancel)}`,
  );
}
