// The end-of-run checks of the chaos suite: what must hold after a scenario, read from the database
// (getJob of every expected job) and from the workers' own JSON-line logs. Each invariant is one small
// function returning its violations; verifyRun runs them all and adds up the figures.
import type { AwaClient, JobRecord } from '../../src/index.js';
import type { ChaosLine } from '../fixtures/chaos-jobs.js';
import type { AttemptLine, ChaosWorker } from './harness.js';

type SettledLine = Extract<ChaosLine, { event: 'settled' }>;
type ErrorLine = Extract<ChaosLine, { event: 'error' }>;

export interface ExpectedJob {
  id: string;
  uid: string;
  kind: string;
  /** Terminal state the job must end in; 'failed' only where attempts run out by design. */
  state: 'completed' | 'failed';
  /** Runs of the kind's handler may be abandoned by design (kind deadline): overlap is then allowed. */
  abandonable?: boolean;
}

export interface RunReport {
  jobs: number;
  completed: number;
  failed: number;
  lost: number;
  /** Attempt starts logged by handlers. */
  attemptsLogged: number;
  /** Distinct (job, run_lease) rescued by a leader. */
  rescued: number;
  /** Settlements the fence rejected. */
  staleRejected: number;
  maxAttempt: number;
  /** `error` lines the workers logged (lost connections, failed flushes, failed stop…). */
  errorsLogged: number;
  violations: string[];
}

export interface VerifyOptions {
  /**
   * Rescue of a process that was neither killed nor frozen is tolerated (e.g. its heartbeats could not
   * reach a restarting server); every other check still applies.
   */
  allowRescueOfLiveWorkers?: boolean;
  /**
   * Workers may log errors: only for scenarios that break their connections on purpose. By default a
   * single logged error is a violation, so a scenario meant to run clean proves it did.
   */
  allowWorkerErrors?: boolean;
}

interface Rescue {
  instanceId: string;
  reason: string;
  outcome: string;
  t: number;
}

/** Everything the workers logged, indexed by attempt key `${jobId}:${runLease}`. */
interface RunLogs {
  starts: Map<string, AttemptLine[]>;
  ends: Map<string, AttemptLine>;
  settled: Map<string, SettledLine[]>;
  rescued: Map<string, Rescue>;
  errors: { instanceId: string; line: ErrorLine }[];
  /** Attempt starts per job id. */
  attemptsByJob: Map<string, AttemptLine[]>;
  byPid: Map<number, ChaosWorker>;
  byInstance: Map<string, ChaosWorker>;
}

const key = (id: string, lease: number) => `${id}:${lease}`;

function push<K, V>(map: Map<K, V[]>, k: K, v: V): void {
  const list = map.get(k);
  if (list) list.push(v);
  else map.set(k, [v]);
}

function collectLogs(workers: readonly ChaosWorker[]): RunLogs {
  const logs: RunLogs = {
    starts: new Map(),
    ends: new Map(),
    settled: new Map(),
    rescued: new Map(),
    errors: [],
    attemptsByJob: new Map(),
    byPid: new Map(workers.map((w) => [w.pid, w])),
    byInstance: new Map(workers.map((w) => [w.instanceId, w])),
  };
  for (const w of workers) {
    for (const l of w.lines()) {
      if (l.event === 'start') {
        push(logs.starts, key(l.id, l.runLease), l);
        push(logs.attemptsByJob, l.id, l);
      } else if (l.event === 'end') logs.ends.set(key(l.id, l.runLease), l);
      else if (l.event === 'settled') push(logs.settled, key(l.id, l.runLease), l);
      else if (l.event === 'rescue')
        for (const r of l.rescued) logs.rescued.set(key(r.jobId, r.runLease), { ...r, t: l.t });
      else if (l.event === 'error') logs.errors.push({ instanceId: w.instanceId, line: l });
    }
  }
  for (const list of logs.attemptsByJob.values()) list.sort((a, b) => a.t - b.t || a.runLease - b.runLease);
  return logs;
}

/** No attempt (job, run_lease) was started twice: the fence hands each lease to one handler. */
function attemptsStartedOnce(logs: RunLogs): string[] {
  const v: string[] = [];
  for (const [k, s] of logs.starts)
    if (s.length > 1)
      v.push(`attempt ${k} started ${s.length} times (pids ${s.map((x) => x.pid).join(', ')})`);
  return v;
}

/**
 * The job carries its own uid: in the args the database still holds (a completed job's body is pruned with
 * its ring slot, leaving compact history without args) and in the args every attempt of it was handed.
 */
function carriesItsUid(j: ExpectedJob, rec: JobRecord, logs: RunLogs): boolean {
  const stored = rec.args === null || (rec.args as { uid?: string }).uid === j.uid;
  return stored && (logs.attemptsByJob.get(j.id) ?? []).every((a) => a.uid === j.uid);
}

/** The job is terminal, in the state expected, carrying its own uid, and failed only once out of attempts. */
function terminalAsExpected(j: ExpectedJob, rec: JobRecord | null, logs: RunLogs): string[] {
  if (!rec || (rec.state !== 'completed' && rec.state !== 'failed'))
    return [`job ${j.id} (${j.uid}) is ${rec ? rec.state : 'missing'}, expected ${j.state}`];
  const v: string[] = [];
  if (!carriesItsUid(j, rec, logs)) {
    const handed = (logs.attemptsByJob.get(j.id) ?? []).map((a) => a.uid);
    v.push(
      `job ${j.id} carries uid ${(rec.args as { uid?: string } | null)?.uid} (handlers saw ${handed.join(', ')}), expected ${j.uid}`,
    );
  }
  if (rec.state !== j.state)
    v.push(`job ${j.id} (${j.uid}, ${j.kind}) ended ${rec.state}, expected ${j.state}`);
  if (rec.state === 'failed' && rec.attempt < (rec.maxAttempts ?? Infinity) && j.state !== 'failed')
    v.push(`job ${j.id} failed after ${rec.attempt}/${rec.maxAttempts} attempts`);
  return v;
}

/**
 * The attempt the database recorded was run by a handler, with the same attempt number; every attempt
 * started is counted; a completed job completed once, by the recorded lease, whose handler returned.
 */
function recordedAttemptAccountedFor(j: ExpectedJob, rec: JobRecord, logs: RunLogs): string[] {
  const v: string[] = [];
  const attempts = logs.attemptsByJob.get(j.id) ?? [];
  const final = attempts.find((a) => a.runLease === rec.runLease);
  if (!final)
    v.push(`job ${j.id}: its recorded attempt (lease ${rec.runLease}) was never started by a handler`);
  else if (final.attempt !== rec.attempt)
    v.push(`job ${j.id}: final attempt ${final.attempt} logged, ${rec.attempt} recorded`);
  if (rec.attempt < attempts.length)
    v.push(`job ${j.id}: ${attempts.length} attempts logged, attempt counter ${rec.attempt}`);
  if (rec.state !== 'completed') return v;
  if (!logs.ends.has(key(j.id, rec.runLease)))
    v.push(`job ${j.id} completed by lease ${rec.runLease}, whose handler never returned`);
  const accepted = attempts
    .flatMap((a) => logs.settled.get(key(j.id, a.runLease)) ?? [])
    .filter((s) => s.accepted && s.outcome === 'completed');
  if (accepted.length > 1) v.push(`job ${j.id}: ${accepted.length} completions accepted`);
  if (accepted[0] && accepted[0].runLease !== rec.runLease)
    v.push(
      `job ${j.id}: completion of lease ${accepted[0].runLease} accepted, yet lease ${rec.runLease} recorded`,
    );
  return v;
}

/**
 * No two attempts of a job overlap: attempt b starts only once attempt a is over, or a's process is
 * dead or frozen, or a's kind abandons hung handlers and a was settled (kind deadline) or rescued
 * (queue deadline) before b started.
 */
function attemptsDoNotOverlap(j: ExpectedJob, logs: RunLogs): string[] {
  const v: string[] = [];
  const attempts = logs.attemptsByJob.get(j.id) ?? [];
  for (let i = 0; i + 1 < attempts.length; i++) {
    const a = attempts[i]!;
    const b = attempts[i + 1]!;
    const aEnd = logs.ends.get(key(a.id, a.runLease));
    if (aEnd && aEnd.t <= b.t) continue;
    if (logs.byPid.get(a.pid)?.deadOrFrozenAt(b.t)) continue;
    const aSettled = logs.settled.get(key(a.id, a.runLease))?.find((s) => s.t <= b.t);
    if (j.abandonable && aSettled && aSettled.outcome !== 'completed') continue;
    const aRescued = logs.rescued.get(key(a.id, a.runLease));
    if (j.abandonable && aRescued?.reason === 'deadline_exceeded' && aRescued.t <= b.t) continue;
    v.push(
      `job ${j.id}: attempt ${a.attempt} (lease ${a.runLease}, pid ${a.pid}) still running when attempt ${b.attempt} started (pid ${b.pid})`,
    );
  }
  return v;
}

/** An attempt that never ended in a process the test killed was rescued. */
function orphansRescued(j: ExpectedJob, logs: RunLogs): string[] {
  if (j.abandonable) return [];
  const v: string[] = [];
  for (const a of logs.attemptsByJob.get(j.id) ?? []) {
    const k = key(a.id, a.runLease);
    if (logs.byPid.get(a.pid)?.killedAt != null && !logs.ends.has(k) && !logs.rescued.has(k))
      v.push(`job ${j.id}: attempt ${a.attempt} orphaned by killed pid ${a.pid} was never rescued`);
  }
  return v;
}

/**
 * Rescues hit only dead or frozen processes (unless tolerated); a rescued job has its attempt counted,
 * was re-run if the rescue retried it, and carries a rescue entry in its error history.
 */
function rescuesJustified(
  logs: RunLogs,
  records: Map<string, JobRecord | null>,
  opts: VerifyOptions,
): string[] {
  const v: string[] = [];
  for (const [k, r] of logs.rescued) {
    const [id, lease] = k.split(':') as [string, string];
    const rec = records.get(id);
    if (rec === undefined) continue; // not one of this run's jobs
    if (!opts.allowRescueOfLiveWorkers && r.reason === 'worker_lost') {
      const owner = logs.byInstance.get(r.instanceId);
      const damaged = owner !== undefined && (owner.killedAt !== null || owner.frozen.length > 0);
      if (!damaged) v.push(`attempt ${k} rescued from live worker ${r.instanceId}`);
    }
    if (!rec) continue;
    if (r.outcome === 'retry' && rec.runLease <= Number(lease))
      v.push(`job ${id} rescued (lease ${lease}) but never re-run`);
    if (r.outcome === 'retry' && rec.attempt < 2)
      v.push(`job ${id} rescued yet its attempt counter is ${rec.attempt}`);
    // Compact history (kind null: the job's ring slot was pruned) keeps state, attempt and time, not the
    // error history; the attempt counter above still proves the rescue there.
    if (rec.kind !== null && !rec.meta?.errors?.some((e) => /rescued/i.test(e.error)))
      v.push(`job ${id} rescued without a rescue entry in its error history`);
  }
  return v;
}

/**
 * Each settlement the fence rejected is explained: its attempt was rescued first, or (connection loss)
 * it is a replay of the very attempt the database recorded, whose first flush committed but whose
 * answer was lost.
 */
function staleSettlementsExplained(logs: RunLogs, records: Map<string, JobRecord | null>): string[] {
  const v: string[] = [];
  for (const [k, list] of logs.settled) {
    for (const s of list) {
      if (s.accepted) continue;
      const rec = records.get(s.id);
      if (rec === undefined) continue;
      const replayOfRecorded = rec !== null && rec.runLease === s.runLease && list.length > 1;
      const recordedCompletion = rec !== null && rec.runLease === s.runLease && rec.state === 'completed';
      if (!logs.rescued.has(k) && !replayOfRecorded && !recordedCompletion)
        v.push(`settlement of ${k} (${s.outcome}) rejected, yet the attempt was never rescued`);
    }
  }
  return v;
}

/** No worker logged an error, unless the scenario breaks connections on purpose. */
function noWorkerErrors(logs: RunLogs, opts: VerifyOptions): string[] {
  if (opts.allowWorkerErrors) return [];
  return logs.errors.map(
    (e) =>
      `worker ${e.instanceId} logged an error at ${e.line.t}: ${e.line.message}${e.line.context ? ` [${e.line.context}]` : ''}`,
  );
}

/** Runs every invariant; `violations` lists what failed (empty when the run was clean). */
export async function verifyRun(
  client: AwaClient,
  expected: readonly ExpectedJob[],
  workers: readonly ChaosWorker[],
  opts: VerifyOptions = {},
): Promise<RunReport> {
  const logs = collectLogs(workers);
  const records = new Map<string, JobRecord | null>();
  // In rounds of a few hundred: thousands of reads at once would wait past the client pool's connect timeout.
  for (let i = 0; i < expected.length; i += 200)
    await Promise.all(
      expected.slice(i, i + 200).map(async (j) => records.set(j.id, await client.getJob(j.id))),
    );

  const v = [...attemptsStartedOnce(logs)];
  let completed = 0;
  let failed = 0;
  let maxAttempt = 0;
  const uids = new Set<string>();
  for (const j of expected) {
    const rec = records.get(j.id) ?? null;
    const terminal = terminalAsExpected(j, rec, logs);
    v.push(...terminal);
    if (!rec || (rec.state !== 'completed' && rec.state !== 'failed')) continue;
    if (carriesItsUid(j, rec, logs)) uids.add(j.uid);
    if (rec.state === 'completed') completed++;
    else failed++;
    maxAttempt = Math.max(maxAttempt, rec.attempt);
    v.push(
      ...recordedAttemptAccountedFor(j, rec, logs),
      ...attemptsDoNotOverlap(j, logs),
      ...orphansRescued(j, logs),
    );
  }
  v.push(
    ...rescuesJustified(logs, records, opts),
    ...staleSettlementsExplained(logs, records),
    ...noWorkerErrors(logs, opts),
  );

  let attemptsLogged = 0;
  for (const s of logs.starts.values()) attemptsLogged += s.length;
  let staleRejected = 0;
  for (const list of logs.settled.values())
    for (const s of list) if (!s.accepted && records.get(s.id) !== undefined) staleRejected++;
  return {
    jobs: expected.length,
    completed,
    failed,
    // Not terminal, or terminal under another job's uid.
    lost: expected.length - uids.size,
    attemptsLogged,
    rescued: [...logs.rescued.keys()].filter((k) => records.has(k.split(':')[0]!)).length,
    staleRejected,
    maxAttempt,
    errorsLogged: logs.errors.length,
    violations: v,
  };
}
