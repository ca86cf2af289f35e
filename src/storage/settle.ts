import { toStorableJson } from '../model/jsonb.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// Settling attempts: one call of the settle_attempts() SQL function per settle flush, whatever the mix of
// outcomes. Every row carries its receipt and fencing token; the database accepts only rows whose
// receipt is still open, so a stale writer (rescued, cancelled, or already settled) is a no-op. Plain
// completions travel as one member range per receipt (what a drain flushes), the rest row by row. A completion's
// result travels beside the ranges, named by receipt and member; a flush without one sends no results at all.

/** 'wait': park the job for the callback its attempt registered (see sql/functions/engine/callbacks.sql). */
export type Outcome = 'completed' | 'retry' | 'snooze' | 'failed' | 'cancelled' | 'wait' | 'block';

export interface Settlement {
  claimSlot: number;
  batchId: string;
  idx: number;
  jobId: string;
  runLease: number;
  outcome: Outcome;
  /** For snooze, and retry with a delay of its own: when the job becomes runnable again. A retry without
   * one waits out the backoff rule (backoff() in sql/functions/core/common.sql). */
  runAt?: Date;
  /** Appended to the job's error history (retry, failed, cancelled). */
  error?: Record<string, unknown>;
  /** A completion's result, as JSON text (encodeResult()): stored in job_results with the completion. Absent
   * when the handler returned nothing: then nothing about results is sent. */
  result?: string;
}

/** Returns the ids whose settlement was accepted. `named`: prepared once per connection (not through a
 * transaction pooler: see pooler.ts). */
export async function settleAttempts(
  db: Queryable,
  schema: Schema,
  items: readonly Settlement[],
  named = true,
): Promise<Set<string>> {
  if (items.length === 0) return new Set();
  const { rows: single, groups, results } = splitPlainCompletions(items);
  const { rows } = await db.query<{
    job_id: string | null;
    group_batch: string | null;
    group_idxs: string | null;
  }>({
    name: named ? `awa-settle-${schema.name}` : undefined,
    text: `select job_id::text, group_batch::text, group_idxs::text from ${schema.ident}.settle_attempts($1::smallint[], $2::bigint[], $3::int[], $4::bigint[], $5::bigint[], $6::text[], $7::timestamptz[], $8::jsonb[], $9::smallint[], $10::bigint[], $11::bigint[], $12::int4multirange[], $13::bigint[], $14::int[], $15::bigint[], $16::jsonb)`,
    values: [
      single.map((s) => s.claimSlot),
      single.map((s) => s.batchId),
      single.map((s) => s.idx),
      single.map((s) => s.jobId),
      single.map((s) => s.runLease),
      single.map((s) => s.outcome),
      single.map((s) => s.runAt ?? null),
      single.map((s) => (s.error ? toStorableJson(JSON.stringify(s.error)) : null)),
      groups.map((g) => g.claimSlot),
      groups.map((g) => g.batchId),
      groups.map((g) => g.runLease),
      groups.map((g) => multirange(g.members.map((m) => m.idx))),
      ...resultParams(results),
    ],
  });
  const accepted = new Set<string>();
  const byBatch = new Map<string, Map<number, string>>();
  for (const g of groups) {
    let members = byBatch.get(g.batchId);
    if (!members) byBatch.set(g.batchId, (members = new Map()));
    for (const m of g.members) members.set(m.idx, m.jobId);
  }
  for (const r of rows) {
    if (r.job_id !== null) accepted.add(r.job_id);
    else if (r.group_batch !== null && r.group_idxs !== null) {
      const members = byBatch.get(r.group_batch);
      for (const [lo, hi] of ranges(r.group_idxs))
        for (let idx = lo; idx < hi; idx++) {
          const id = members?.get(idx);
          if (id !== undefined) accepted.add(id);
        }
    }
  }
  return accepted;
}

interface CompletionGroup {
  claimSlot: number;
  batchId: string;
  runLease: number;
  members: { idx: number; jobId: string }[];
}

/** Plain completions (no error, no run time) grouped per receipt and run lease, with the results some of them
 * carry; everything else row by row. */
function splitPlainCompletions(items: readonly Settlement[]): {
  rows: Settlement[];
  groups: CompletionGroup[];
  results: Settlement[];
} {
  const rows: Settlement[] = [];
  const groups = new Map<string, CompletionGroup>();
  const results: Settlement[] = [];
  for (const s of items) {
    if (s.outcome !== 'completed' || s.error || s.runAt) {
      rows.push(s);
      continue;
    }
    if (s.result !== undefined) results.push(s);
    const key = `${s.batchId}:${s.runLease}:${s.claimSlot}`;
    let g = groups.get(key);
    if (!g)
      groups.set(
        key,
        (g = { claimSlot: s.claimSlot, batchId: s.batchId, runLease: s.runLease, members: [] }),
      );
    g.members.push({ idx: s.idx, jobId: s.jobId });
  }
  return { rows, groups: [...groups.values()], results };
}

/** settle_attempts()'s result arguments: receipts, members and job ids, and the results as one JSON array in the
 * same order (joined as they are: each is JSON text already). All null when no completion carries one. */
function resultParams(results: readonly Settlement[]): unknown[] {
  if (results.length === 0) return [null, null, null, null];
  return [
    results.map((s) => s.batchId),
    results.map((s) => s.idx),
    results.map((s) => s.jobId),
    `[${results.map((s) => s.result).join(',')}]`,
  ];
}

/** An int4multirange literal of member indexes: `{[1,4),[6,7)}`. */
function multirange(idxs: number[]): string {
  const sorted = [...idxs].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1]! <= sorted[j]! + 1) j++;
    parts.push(`[${sorted[i]},${sorted[j]! + 1})`);
    i = j + 1;
  }
  return `{${parts.join(',')}}`;
}

/** The [lower, upper) pairs of an int4multirange's text form (PostgreSQL prints it canonical: `[a,b)`). */
function* ranges(text: string): Generator<[number, number]> {
  for (const m of text.matchAll(/\[(\d+),(\d+)\)/g)) yield [Number(m[1]), Number(m[2])];
}
