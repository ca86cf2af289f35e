import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { JobRow } from '../model/enqueue-options.js';
import { appendsToLane, enqueueRows } from './enqueue.js';
import type { Schema } from './schema.js';

// The bulk producer: rows stream through COPY straight into the ring's current ready partition. Input is
// consumed in chunks; each chunk reserves one lane range per (queue, priority) and COPYs it, so memory
// stays bounded for any input size. The caller's client must be inside a transaction (the reservation and
// the rows must commit together: see reserve_lane() in sql/functions/engine/lanes.sql), and the whole load commits
// (or vanishes) at once. Reserving holds no lock past its own statement, so two bulk producers never wait for
// each other, in whatever order they reach their lanes.

const CHUNK_BYTES = 64 * 1024;

/** COPYs one chunk; returns how many of its (unique) jobs were duplicates and not inserted. `named`: as for
 * enqueueRows. */
export async function copyEnqueueChunk(
  client: pg.ClientBase,
  schema: Schema,
  rows: readonly JobRow[],
  named = true,
): Promise<number> {
  const lanes = new Map<string, JobRow[]>();
  // Scheduled and unique jobs go through enqueue(): the backlog table, and the unique key's claim.
  const viaEnqueue: JobRow[] = [];
  for (const row of rows) {
    if (!appendsToLane(row)) {
      viaEnqueue.push(row);
      continue;
    }
    const key = `${row.priority}\u0000${row.queue}`;
    let lane = lanes.get(key);
    if (!lane) lanes.set(key, (lane = []));
    lane.push(row);
  }
  for (const laneRows of lanes.values()) await copyLane(client, schema, laneRows);
  if (viaEnqueue.length === 0) return 0;
  return (await enqueueRows(client, schema, viaEnqueue, named)).filter((r) => !r.inserted).length;
}

async function copyLane(client: pg.ClientBase, schema: Schema, rows: readonly JobRow[]): Promise<void> {
  const first = rows[0]!;
  const { rows: res } = await client.query<{ lane_id: number; first_seq: string; slot: number }>(
    `select lane_id, first_seq, slot from ${schema.ident}.reserve_lane($1, $2::smallint, $3, true)`,
    [first.queue, first.priority, rows.length],
  );
  const { lane_id: laneId, slot } = res[0]!;
  const stream = client.query(
    copyFrom(
      `copy ${schema.ident}.ready_entries_${slot} (slot, lane_id, lane_seq, kind, queue, priority, args, max_attempts, meta) from stdin`,
    ),
  );
  // pipeline() settles once, with the server's verdict: a rejected row ends the load with its error and
  // leaves no promise behind to reject unobserved.
  await pipeline(Readable.from(copyText(rows, slot, laneId, Number(res[0]!.first_seq))), stream);
}

function* copyText(
  rows: readonly JobRow[],
  slot: number,
  laneId: number,
  firstSeq: number,
): Generator<string> {
  const first = rows[0]!;
  const prefix = `${slot}\t${laneId}\t`;
  const suffix = `\t${escapeCopy(first.kind)}`;
  let seq = firstSeq;
  let buf = '';
  for (const row of rows) {
    const kind = row.kind === first.kind ? suffix : `\t${escapeCopy(row.kind)}`;
    buf += `${prefix}${seq++}${kind}\t${escapeCopy(row.queue)}\t${row.priority}\t${escapeCopy(row.argsJson)}\t${row.maxAttempts}\t${row.metaJson === null ? '\\N' : escapeCopy(row.metaJson)}\n`;
    if (buf.length >= CHUNK_BYTES) {
      yield buf;
      buf = '';
    }
  }
  if (buf) yield buf;
}

/** COPY text format: backslash is the escape character; JSON and validated names have no raw tabs or newlines. */
function escapeCopy(value: string): string {
  return value.includes('\\') ? value.replace(/\\/g, '\\\\') : value;
}
