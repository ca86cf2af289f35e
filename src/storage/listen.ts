import type pg from 'pg';
import { callbackChannel } from './callbacks.js';
import { cancelChannel, parseAttemptPayload } from './cancel.js';
import type { Schema } from './schema.js';

// The wake-up connection: a client of its own that LISTENs for "queue got jobs" and "abort this attempt"
// notifications (between them the runtime may run a statement on it: see Wakeup.lend()). Both are hints:
// polling and the fence stay the truth; reconnecting after a loss is the runtime's job.

export interface Notifications {
  onQueue(queue: string): void;
  onCancel(jobId: string, runLease: number): void;
  /** A callback was recorded for an attempt waiting in its handler. */
  onCallback(jobId: string, runLease: number): void;
}

export async function listenForJobs(client: pg.ClientBase, schema: Schema, on: Notifications): Promise<void> {
  const cancel = cancelChannel(schema);
  const callback = callbackChannel(schema);
  client.on('notification', (msg) => {
    if (!msg.payload) return;
    if (msg.channel === schema.jobsChannel) return on.onQueue(msg.payload);
    // Both other channels carry "<job id>:<run lease>".
    const target = parseAttemptPayload(msg.payload);
    if (!target) return;
    if (msg.channel === cancel) on.onCancel(target.jobId, target.runLease);
    else if (msg.channel === callback) on.onCallback(target.jobId, target.runLease);
  });
  await client.query(
    [schema.jobsChannel, cancel, callback].map((c) => `listen ${client.escapeIdentifier(c)}`).join('; '),
  );
}

/** One round trip on the wake-up session, to learn whether it still answers (see Wakeup's idle check). */
export async function pingSession(client: pg.ClientBase): Promise<void> {
  await client.query('select 1');
}

/** The channel that names jobs that ended while a producer waited for them (notify_results() in
 * sql/functions/core/results.sql): "<job id>". */
export function resultChannel(schema: Schema): string {
  return `awa:${schema.ident}:result`;
}

/** LISTENs on a waiting client's own session for the end of the jobs it waits for (AwaClient.result()). A hint
 * like the others: the waiter reads the job again when it hears its id, and after every reconnect. */
export async function listenForResults(
  client: pg.ClientBase,
  schema: Schema,
  onEnded: (jobId: string) => void,
): Promise<void> {
  const channel = resultChannel(schema);
  client.on('notification', (msg) => {
    if (msg.channel === channel && msg.payload) onEnded(msg.payload);
  });
  await client.query(`listen ${client.escapeIdentifier(channel)}`);
}
