import { once } from 'node:events';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { JobRow } from '../model/enqueue-options.js';
import { enqueueRows } from './enqueue.js';
import type { Schema } from './schema.js';

// The bulk producer: rows stream through COPY straight into the ring's current ready partition. Input is
// consumed in chunks; each chunk reserves one lane range per (queue, priority) and COPYs it, so memory
// stays bounded for any input size. The caller's client must be inside a transaction: lane locks are
// held to its end, and the whole load commits (or vanishes) at once.

const CHUNK_BYTES = 64 * 1024;

export async function copyEnqueueChunk(
  client: pg.ClientBase,
  schema: Schema,
  rows: readonly JobRow[],
): Promise<void> {
  const lanes = new Map<string, JobRow[]>();
  const deferred: JobRow[] = [];
  for (const row of rows) {
    if (row.runAt) {
      deferred.push(row);
      continue;
    }
    const key = `${row.priority}\u0000${row.queue}`;
    let lane = lanes.get(key);
    if (!lane) lanes.set(key, (lane = []));
    lane.push(row);
  }
  // Lanes are reserved in a fixed order so two bulk producers cannot deadlock on each other's lane locks.
  const ordered = [...lanes.values()].sort((a, b) => laneOrder(a[0]!, b[0]!));
  for (const laneRows of ordered) await copyLane(client, schema, laneRows);
  if (deferred.length > 0) await enqueueRows(client, schema, deferred);
}

function laneOrder(a: JobRow, b: JobRow): number {
  return a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : a.priority - b.priority;
}

async function copyLane(client: pg.ClientBase, schema: Schema, rows: readonly JobRow[]): Promise<void> {
  const first = rows[0]!;
  const { rows: res } = await client.query<{ lane_id: number; first_seq: string; slot: number }>(
    `select lane_id, first_seq, slot from ${schema.ident}.reserve_lane($1, $2::smallint, 0::smallint, $3)`,
    [first.queue, first.priority, rows.length],
  );
  const { lane_id: laneId, slot } = res[0]!;
  let seq = Number(res[0]!.first_seq);
  const stream = client.query(
    copyFrom(
      `copy ${schema.ident}.ready_entries_${slot} (slot, lane_id, lane_seq, kind, queue, priority, args, max_attempts, meta) from stdin`,
    ),
  );
  const done = once(stream, 'finish');
  const prefix = `${slot}\t${laneId}\t`;
  const suffix = `\t${copyText(first.kind)}`;
  let buf = '';
  for (const row of rows) {
    const kind = row.kind === first.kind ? suffix : `\t${copyText(row.kind)}`;
    buf += `${prefix}${seq++}${kind}\t${copyText(row.queue)}\t${row.priority}\t${copyText(row.argsJson)}\t${row.maxAttempts}\t${row.metaJson === null ? '\\N' : copyText(row.metaJson)}\n`;
    if (buf.length >= CHUNK_BYTES) {
      if (!stream.write(buf)) await once(stream, 'drain');
      buf = '';
    }
  }
  if (buf) stream.write(buf);
  stream.end();
  await done;
}

/** COPY text format: backslash is the escape character; JSON and validated names have no raw tabs or newlines. */
function copyText(value: string): string {
  return value.includes('\\') ? value.replace(/\\/g, '\\\\') : value;
}
