// The checker of a concurrent history (history.ts): each invariant is one function over the recorded
// operations and the database's final word (getJob), returning its violations. A failed check writes the
// whole history to a file so it can be read operation by operation.
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import type { AwaClient, JobRecord } from '../../src/index.js';
import { ringStorage, type Schema } from '../../src/storage/operations.js';
import type { ChaosLine } from '../fixtures/chaos-jobs.js';
import type { ClaimedItem, HistoryEntry, HistoryEvent, SettledItem } from './history-events.js';
import { limitedFigures, limitsHeld, type HistoryLimits, type LimitedFigures } from './history-limits.js';

const MAX_ATTEMPTS = 3;
const TERMINAL = new Set(['completed', 'failed', 'cancelled', 'dlq']);

/** Whether an accepted settlement ended the job (rather than scheduling another attempt). */
function endsJob(s: SettledItem, attempt: number): boolean {
  if (s.outcome === 'completed' || s.outcome === 'cancelled' || s.outcome === 'failed') return true;
  return s.outcome === 'retry' && attempt >= MAX_ATTEMPTS;
}

interface Indexed {
  committed: Set<string>;
  maybe: Set<string>;
  rolledBack: Set<string>;
  idOf: Map<string, string>;
  /** Per job: its claims in history order. */
  claims: Map<string, (ClaimedItem & { n: number })[]>;
  blocks: string[][];
}

function index(events: readonly HistoryEvent[]): Indexed {
  const x: Indexed = {
    committed: new Set(),
    maybe: new Set(),
    rolledBack: new Set(),
    idOf: new Map(),
    claims: new Map(),
    blocks: [],
  };
  const blockOf = new Map<string, string[]>();
  for (const e of events) {
    if (e.op === 'enqueue' && e.block) blockOf.set(e.uids[0]!, e.uids);
    if (e.op === 'committed') {
      for (const u of e.uids) x.committed.add(u);
      const b = blockOf.get(e.uids[0]!);
      if (b) x.blocks.push(b);
    }
    if (e.op === 'commit_unknown') for (const u of e.uids) x.maybe.add(u);
    if (e.op === 'rolled_back') for (const u of e.uids) x.rolledBack.add(u);
    if (e.op === 'claimed')
      for (const j of e.jobs) {
        x.idOf.set(j.uid, j.id);
        x.claims.set(j.id, [...(x.claims.get(j.id) ?? []), { ...j, n: e.n }]);
      }
  }
  return x;
}

/** Only jobs whose producer committed (or may have: its commit's answer was lost) are ever claimed. */
function noRolledBackJobRuns(x: Indexed): string[] {
  const v: string[] = [];
  for (const [uid, id] of x.idOf)
    if (!x.committed.has(uid) && !x.maybe.has(uid))
      v.push(
        `job ${id} (${uid}) was claimed but its producer ${x.rolledBack.has(uid) ? 'rolled back' : 'never committed'}`,
      );
  return v;
}

/** Per attempt (job, run lease): at most one settlement or rescue accepted, and none sent after a later
 * attempt of the job was claimed (a stale run lease). */
function attemptsSettledOnce(events: readonly HistoryEvent[], x: Indexed): string[] {
  const v: string[] = [];
  const accepted = new Map<string, number>();
  for (const e of events) {
    if (e.op !== 'settled' && e.op !== 'rescued') continue;
    for (const s of e.items) {
      if (!s.accepted) continue;
      const key = `${s.id}:${s.runLease}`;
      accepted.set(key, (accepted.get(key) ?? 0) + 1);
      if (accepted.get(key) === 2)
        v.push(`attempt ${key} was settled twice (the second by ${e.actor} at #${e.n})`);
      if (e.op !== 'settled') continue;
      const later = (x.claims.get(s.id) ?? []).find((c) => c.n < e.sent && c.runLease > s.runLease);
      if (later)
        v.push(
          `stale write accepted: ${e.actor} settled ${key} (sent at #${e.sent}) after lease ${later.runLease} was claimed at #${later.n}`,
        );
    }
  }
  return v;
}

/**
 * A step never runs again once it recorded a result: no attempt whose read of the recorded steps was sent after
 * an acknowledged record of that step ran it again; one record per step (the first wins), and every replay and
 * lost race returns the winner's value, which is what the database holds at the end. A record is accepted only
 * from the attempt holding the job: none sent after the attempt was settled or rescued, or after a later
 * attempt was claimed.
 */
function stepsRunOnce(
  events: readonly HistoryEvent[],
  x: Indexed,
  stored: ReadonlyMap<string, unknown>,
): string[] {
  const v: string[] = [];
  const won = new Map<string, Extract<HistoryEvent, { op: 'step_recorded' }>>();
  const closedAt = new Map<string, number>();
  for (const e of events) {
    if (e.op === 'settled' || e.op === 'rescued')
      for (const s of e.items)
        if (s.accepted && !closedAt.has(`${s.id}:${s.runLease}`)) closedAt.set(`${s.id}:${s.runLease}`, e.n);
    if (e.op !== 'step_recorded' || e.status !== 'recorded') continue;
    const key = `${e.id}/${e.name}`;
    const first = won.get(key);
    if (first)
      v.push(
        `step ${key} recorded twice: lease ${first.runLease} at #${first.n}, lease ${e.runLease} at #${e.n}`,
      );
    else won.set(key, e);
    const closed = closedAt.get(`${e.id}:${e.runLease}`);
    if (closed !== undefined && closed < e.sent)
      v.push(
        `stale step recorded: ${key} by lease ${e.runLease} (sent at #${e.sent}) after that attempt ended at #${closed}`,
      );
    const later = (x.claims.get(e.id) ?? []).find((c) => c.n < e.sent && c.runLease > e.runLease);
    if (later)
      v.push(
        `stale step recorded: ${key} by lease ${e.runLease} (sent at #${e.sent}) after lease ${later.runLease} was claimed at #${later.n}`,
      );
  }
  for (const e of events) {
    const key =
      'name' in e && (e.op === 'step_run' || e.op === 'step_replayed' || e.op === 'step_recorded')
        ? `${e.id}/${e.name}`
        : null;
    if (key === null) continue;
    const w = won.get(key);
    if (e.op === 'step_run' && w && w.n < e.readSent)
      v.push(
        `step ${key} ran again in lease ${e.runLease} (read sent at #${e.readSent}) after lease ${w.runLease} recorded it at #${w.n}`,
      );
    const answered = e.op === 'step_replayed' || (e.op === 'step_recorded' && e.status === 'replayed');
    if (answered && w && JSON.stringify(e.result) !== JSON.stringify(w.result))
      v.push(
        `step ${key} replayed ${JSON.stringify(e.result)} to lease ${e.runLease}, but ${JSON.stringify(w.result)} was recorded`,
      );
  }
  for (const [key, w] of won)
    if (JSON.stringify(stored.get(key)) !== JSON.stringify(w.result))
      v.push(
        `step ${key}: the database holds ${JSON.stringify(stored.get(key))}, lease ${w.runLease} recorded ${JSON.stringify(w.result)}`,
      );
  return v;
}

/** Every committed job was claimed, ended exactly once, and the database says it ended that way. */
function exactlyOneTerminalOutcome(
  events: readonly HistoryEvent[],
  x: Indexed,
  records: Map<string, JobRecord | null>,
): string[] {
  const v: string[] = [];
  const ended = new Map<string, string[]>();
  const maybeEnded = new Set<string>();
  for (const e of events) {
    if (e.op !== 'settled' && e.op !== 'rescued' && e.op !== 'settle_unknown') continue;
    for (const s of e.items) {
      const attempt =
        (x.claims.get(s.id) ?? []).find((c) => c.runLease === s.runLease)?.attempt ?? s.runLease;
      if (e.op === 'settle_unknown') {
        if (endsJob(s, attempt)) maybeEnded.add(s.id);
        continue;
      }
      if (s.accepted && endsJob(s, attempt))
        ended.set(s.id, [...(ended.get(s.id) ?? []), `${s.outcome}@${s.runLease}`]);
    }
  }
  for (const uid of x.committed) {
    const id = x.idOf.get(uid);
    if (!id) {
      v.push(`committed job ${uid} was never claimed (lost)`);
      continue;
    }
    const rec = records.get(id);
    if (!rec || !TERMINAL.has(rec.state))
      v.push(`job ${id} (${uid}) ended the run ${rec?.state ?? 'missing'}`);
    const outs = ended.get(id) ?? [];
    if (outs.length > 1) v.push(`job ${id} (${uid}) ended ${outs.length} times: ${outs.join(', ')}`);
    if (outs.length === 0 && !maybeEnded.has(id) && rec && TERMINAL.has(rec.state))
      v.push(`job ${id} (${uid}) is ${rec.state} but no accepted settlement ended it`);
  }
  return v;
}

/** Jobs of one enqueueMany/copyEnqueue block take consecutive positions in input order, so their first
 * attempts are claimed in that order (receipts of one lane are numbered in the order its claims commit). */
function blocksClaimedInOrder(x: Indexed): string[] {
  const v: string[] = [];
  for (const block of x.blocks) {
    const firsts = block
      .map((uid) => ({ uid, c: (x.claims.get(x.idOf.get(uid) ?? '') ?? []).find((c) => c.runLease === 1) }))
      .filter(
        (f): f is { uid: string; c: ClaimedItem & { n: number } } => f.c !== undefined && f.c.batch >= 0,
      );
    const sorted = [...firsts].sort((a, b) => a.c.batch - b.c.batch || a.c.idx - b.c.idx);
    if (sorted.some((f, i) => f !== firsts[i]))
      v.push(
        `block ${block[0]}…: first claims out of input order: ${sorted.map((f) => f.uid.split(':').pop()).join(',')}`,
      );
  }
  return v;
}

export interface HistoryReport {
  jobs: number;
  committed: number;
  rolledBack: number;
  claims: number;
  /** A limited queue's figures: starts the database recorded, attempts the history saw, and the most running
   * at once (per key, and of the queue) in the database samples and in the history's intervals. */
  limited?: LimitedFigures;
  violations: string[];
  file: string | null;
}

/** Runs every check; on a violation writes the history (and the violations) to a file. */
export async function checkHistory(
  events: readonly HistoryEvent[],
  client: AwaClient,
  db: pg.Pool,
  schema: Schema,
  queues: readonly string[],
  label: string,
  limited?: HistoryLimits,
): Promise<HistoryReport> {
  const x = index(events);
  const ids = [...new Set(x.idOf.values())];
  const records = new Map<string, JobRecord | null>();
  for (let i = 0; i < ids.length; i += 100)
    await Promise.all(ids.slice(i, i + 100).map(async (id) => records.set(id, await client.getJob(id))));
  const v = [
    ...(await whereMissingJobsAre(db, schema, x, records)),
    ...noRolledBackJobRuns(x),
    ...attemptsSettledOnce(events, x),
    ...exactlyOneTerminalOutcome(events, x, records),
    ...blocksClaimedInOrder(x),
    ...stepsRunOnce(events, x, await storedSteps(db, schema)),
    ...(await nothingRunning(client, queues)),
    ...(await completedCounted(client, queues, records)),
    ...(await storageBounded(db, schema)),
    ...(limited ? limitsHeld(events, limited) : []),
  ];
  let file: string | null = null;
  if (v.length > 0) {
    file = join(tmpdir(), `awa-history-${label}-${Date.now()}.jsonl`);
    writeFileSync(
      file,
      [JSON.stringify({ violations: v }), ...events.map((e) => JSON.stringify(e))].join('\n') + '\n',
    );
  }
  return {
    jobs: ids.length,
    committed: x.committed.size,
    rolledBack: x.rolledBack.size,
    claims: events.filter((e) => e.op === 'claimed').length,
    ...(limited ? { limited: limitedFigures(events, limited) } : {}),
    violations: v,
    file,
  };
}

/** For a job getJob cannot find: what the database still holds of it (ready rows with their lane, slot, lease
 * and whether a receipt covers them; backlog, parked, terminal and DLQ rows; hold members), so a failure names
 * where the job was last. */
async function whereMissingJobsAre(
  db: pg.Pool,
  schema: Schema,
  x: Indexed,
  records: ReadonlyMap<string, JobRecord | null>,
): Promise<string[]> {
  const missing = [...x.idOf.values()].filter((id) => records.get(id) === null);
  if (missing.length === 0) return [];
  const s = schema.ident;
  const { rows } = await db.query<{ id: string; rows: unknown }>(
    `select j.id::text as id, jsonb_build_object(
       'ready', (select jsonb_agg(jsonb_build_array(r.slot, r.lane_id, l.shard, l.priority, r.lane_seq, r.run_lease,
                                                    ${s}.lane_covers(r.lane_id, r.lane_seq)))
                   from ${s}.ready_entries r join ${s}.lanes l on l.lane_id = r.lane_id where r.job_id = j.id),
       'deferred', (select jsonb_agg(jsonb_build_array(d.state, d.run_at, d.run_lease, d.gate_key))
                      from ${s}.deferred_jobs d where d.job_id = j.id),
       'waiting', (select count(*) from ${s}.waiting_jobs w where w.job_id = j.id),
       'done', (select jsonb_agg(jsonb_build_array(e.state, e.run_lease)) from ${s}.done_entries e where e.job_id = j.id),
       'dlq', (select count(*) from ${s}.dlq_entries q where q.job_id = j.id),
       'holds', (select count(*) from ${s}.limit_holds h where j.id = any(h.job_ids))) as rows
       from unnest($1::bigint[]) j(id)`,
    [missing],
  );
  return rows.map((r) => `job ${r.id} is missing; the database holds ${JSON.stringify(r.rows)}`);
}

/** Every recorded step by `job id/name`, with its value. */
async function storedSteps(db: pg.Pool, schema: Schema): Promise<Map<string, unknown>> {
  const { rows } = await db.query<{ key: string; result: unknown }>(
    `select job_id || '/' || name as key, result from ${schema.ident}.job_steps`,
  );
  return new Map(rows.map((r) => [r.key, r.result]));
}

/** After the run (every claimer gone, the rescue window passed), no job is running. */
async function nothingRunning(client: AwaClient, queues: readonly string[]): Promise<string[]> {
  const counts = (await client.counts()).filter((c) => queues.includes(c.queue));
  return counts
    .filter((c) => c.running > 0 || c.available > 0 || c.waiting > 0)
    .map(
      (c) =>
        `queue ${c.queue} ended with ${c.available} available, ${c.running} running, ${c.waiting} waiting`,
    );
}

/** Each queue's completed count is the number of its jobs that read as completed: the ring's receipts, the
 * leader's slot tallies and compact history, each completion counted once. */
async function completedCounted(
  client: AwaClient,
  queues: readonly string[],
  records: ReadonlyMap<string, JobRecord | null>,
): Promise<string[]> {
  const counts = (await client.counts()).filter((c) => queues.includes(c.queue));
  return queues.flatMap((q) => {
    const want = [...records.values()].filter((r) => r?.queue === q && r.state === 'completed').length;
    const got = counts.find((c) => c.queue === q)?.completed ?? 0;
    return got === want ? [] : [`queue ${q}: counts() says ${got} completed, getJob finds ${want}`];
  });
}

/** Storage is bounded: once everything ended, rotation and prune empty the ring of job rows and closures. */
async function storageBounded(db: pg.Pool, schema: Schema): Promise<string[]> {
  const left = async () =>
    (
      await db.query<{ ready: number; closures: number; receipts: number }>(
        `select (select count(*)::int from ${schema.ident}.ready_entries) as ready,
                (select count(*)::int from ${schema.ident}.closure_batches) as closures,
                (select count(*)::int from ${schema.ident}.claim_batches where size > 0) as receipts`,
      )
    ).rows[0]!;
  const ring = ringStorage(schema).maintenance;
  for (let i = 0; i < 40; i++) {
    const l = await left();
    if (l.ready === 0 && l.closures === 0 && l.receipts === 0) return [];
    await ring.rotate(db);
    await ring.prune(db, { lockTimeoutMs: 100, carryLimit: 1000, carryAfterSlots: 2 });
  }
  const l = await left();
  return [
    `the ring still holds ${l.ready} ready rows, ${l.receipts} receipts with members and ${l.closures} closures after 40 rotations and prunes`,
  ];
}

/** What worker processes logged (test/fixtures/chaos-worker.ts), as history events: each attempt's start as
 * its claim (the receipt is not logged: batch -1, so block order is not judged from it), each flush's
 * verdicts, each rescue. An attempt a SIGKILLed process started and never logged settling may have been
 * settled before it died: an unknown settlement. */
export function workerEvents(
  workers: readonly { instanceId: string; killedAt: number | null; lines(): ChaosLine[] }[],
  t0: number,
  firstN: number,
): HistoryEvent[] {
  const out: HistoryEvent[] = [];
  const push = (t: number, e: HistoryEntry) => out.push({ ...e, t, n: 0 } as HistoryEvent);
  for (const w of workers) {
    const lines = w.lines();
    const settled = new Set(lines.flatMap((l) => (l.event === 'settled' ? [`${l.id}:${l.runLease}`] : [])));
    for (const l of lines) {
      if (l.event === 'start')
        push(l.t, {
          actor: w.instanceId,
          op: 'claimed',
          instance: l.instance,
          queue: '',
          jobs: [{ id: l.id, uid: l.uid, runLease: l.runLease, attempt: l.attempt, batch: -1, idx: 0 }],
        });
      if (l.event === 'end' || l.event === 'abort')
        push(l.t, {
          actor: w.instanceId,
          op: 'attempts_ended',
          attempts: [{ id: l.id, runLease: l.runLease }],
        });
      if (l.event === 'start' && w.killedAt !== null)
        push(w.killedAt, {
          actor: w.instanceId,
          op: 'attempts_ended',
          attempts: [{ id: l.id, runLease: l.runLease }],
        });
      if (l.event === 'start' && w.killedAt !== null && !settled.has(`${l.id}:${l.runLease}`))
        push(w.killedAt, {
          actor: w.instanceId,
          op: 'settle_unknown',
          items: [{ id: l.id, runLease: l.runLease, outcome: 'completed', accepted: false }],
        });
      if (l.event === 'settled')
        push(l.t, {
          actor: w.instanceId,
          op: 'settled',
          sent: -1,
          resend: false,
          items: [{ id: l.id, runLease: l.runLease, outcome: l.outcome, accepted: l.accepted }],
        });
      if (l.event === 'rescue')
        push(l.t, {
          actor: w.instanceId,
          op: 'rescued',
          items: l.rescued.map((r) => ({
            id: r.jobId,
            runLease: r.runLease,
            outcome: r.outcome,
            accepted: true,
          })),
        });
    }
  }
  return out.sort((a, b) => a.t - b.t).map((e, i) => ({ ...e, t: e.t - t0, n: firstN + i }));
}

export type { ClaimedItem, HistoryEntry, HistoryEvent, SettledItem } from './history-events.js';
