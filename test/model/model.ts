// The reference model: what the queue promises, as a small state machine with no SQL in it. The model-based
// test (model-based.test.ts) runs the same commands against it and against the real engine and compares what
// can be observed after every step. docs/correctness.md maps each invariant to the function here that states it
// and to the SQL or TypeScript that enforces it.
import type { AttemptRef } from '../../src/storage/operations.js';
import { FlowControl, type LaneEntry, type LimitedClaim, type ModelLimits } from './flow-control.js';

export type JobState =
  | 'available'
  | 'scheduled'
  | 'running'
  | 'waiting_external'
  | 'retryable'
  | 'completed'
  | 'failed'
  | 'cancelled'
  | 'dlq';

export const TERMINAL: ReadonlySet<JobState> = new Set(['completed', 'failed', 'cancelled', 'dlq']);

/** An attempt as its worker knows it: the engine's own type (the receipt member and the fencing token). */
export type { AttemptRef };

/** The counts a queue nothing names has: zero in every state. */
export type QueueCountsModel = Record<Exclude<JobState, 'dlq' | 'waiting_external'> | 'waiting', number>;
export function emptyCounts(): QueueCountsModel {
  return {
    available: 0,
    running: 0,
    waiting: 0,
    scheduled: 0,
    retryable: 0,
    completed: 0,
    failed: 0,
    cancelled: 0,
  };
}

export interface ModelJob {
  id: string;
  queue: string;
  priority: number;
  /** Enqueued by COPY: its lane is the bulk lane of (queue, priority). */
  bulk: boolean;
  state: JobState;
  /** Attempts started so far (what getJob reports). */
  attempt: number;
  maxAttempts: number;
  /** Claims so far: the run lease of the latest attempt. */
  runLease: number;
  /** Order of the job's current position in its lane (taken when it became runnable, never reused). */
  pos: number;
  /** Committed after later positions of its lane were taken: may run after jobs enqueued after it. */
  late: boolean;
  /** Scheduled or retryable and due: the next promotion makes it available. */
  due: boolean;
  owner: string | null;
  current: AttemptRef | null;
  /** The callback token of the parked attempt; null once used or when not parked. */
  token: string | null;
  uniqueKey: string | null;
  /** Its key under its queue's limits (meta.limitKey, else args.tenant, else ''). */
  key: string;
  /** Waiting at its limited queue's gate: available, but in no lane until a claim lets it through. */
  gated: boolean;
}

export type SettleOutcome = 'completed' | 'retry' | 'failed' | 'cancelled' | 'snooze';
export const CALLBACK_ACTIONS = ['complete', 'fail', 'retry', 'cancel', 'resume'] as const;
export type CallbackAction = (typeof CALLBACK_ACTIONS)[number];

const laneOf = (j: Pick<ModelJob, 'queue' | 'priority' | 'bulk'>) =>
  `${j.queue}|${j.priority}|${j.bulk ? 'bulk' : 'live'}`;

export class QueueModel {
  readonly jobs = new Map<string, ModelJob>();
  readonly paused = new Set<string>();
  /** Every attempt ever claimed, by `${jobId}:${runLease}`: the stale ones must be refused. */
  readonly attempts = new Map<string, AttemptRef>();
  /** Tokens already used or whose attempt ended: a callback with one is rejected. */
  readonly spentTokens = new Set<string>();
  private nextPos = 0;
  /** Flow control of each limited queue (docs/flow-control.md). */
  readonly flow = new Map<string, FlowControl>();
  /** Per limited queue, the positions of its lane's rows cancelled before a claim read them: a claim reads
   * them as rows of its `max` and returns nothing for them. */
  private readonly cancelledRows = new Map<string, number[]>();

  constructor(
    readonly queues: readonly string[],
    readonly dlqQueues: ReadonlySet<string>,
    limited: ReadonlyMap<string, ModelLimits> = new Map(),
  ) {
    for (const [q, l] of limited) this.flow.set(q, new FlowControl(q, l));
  }

  /** A position for a job becoming runnable now (positions of all lanes share one order; only per-lane order matters). */
  takePosition(): number {
    return ++this.nextPos;
  }

  /** Transactional enqueue: a job exists only once its transaction commits (`addCommitted`); a rollback adds nothing. */
  addCommitted(
    j: Pick<ModelJob, 'id' | 'queue' | 'priority' | 'bulk' | 'maxAttempts'> & {
      pos: number;
      scheduled: boolean;
      late: boolean;
      uniqueKey?: string | null;
      key?: string;
    },
  ): void {
    this.jobs.set(j.id, {
      id: j.id,
      queue: j.queue,
      priority: j.priority,
      bulk: j.bulk,
      state: j.scheduled ? 'scheduled' : 'available',
      attempt: 0,
      maxAttempts: j.maxAttempts,
      runLease: 0,
      pos: j.pos,
      late: j.late,
      due: false,
      owner: null,
      current: null,
      token: null,
      uniqueKey: j.uniqueKey ?? null,
      key: j.key ?? '',
      gated: false,
    });
  }

  /** Unique keys: the holder while it is in a blocking state (by default every state before the job ends). */
  uniqueHolder(key: string): ModelJob | null {
    for (const j of this.jobs.values()) if (j.uniqueKey === key && !TERMINAL.has(j.state)) return j;
    return null;
  }

  /** Jobs a claim of `queue` may return now, per lane in claim order (position order). None while paused. */
  claimable(queue: string): Map<string, ModelJob[]> {
    const lanes = new Map<string, ModelJob[]>();
    if (this.paused.has(queue)) return lanes;
    for (const j of this.jobs.values()) {
      if (j.queue !== queue || j.state !== 'available' || j.gated) continue;
      const lane = laneOf(j);
      lanes.set(lane, [...(lanes.get(lane) ?? []), j]);
    }
    for (const list of lanes.values()) list.sort((a, b) => a.pos - b.pos);
    return lanes;
  }

  /**
   * The claim contract, checked against what a claim returned: only available jobs of the queue (so never a
   * rolled-back or unknown one, never a job twice); nothing while paused; and per lane, the jobs that committed in position order are taken oldest first (a job that
   * committed late may be taken ahead of them, or after them). Returns the violations.
   */
  checkClaim(queue: string, claimed: readonly { id: string; attempt: number; runLease: number }[]): string[] {
    const v: string[] = [];
    const lanes = this.claimable(queue);
    const avail = [...lanes.values()].flat();
    const byId = new Map(avail.map((j) => [j.id, j]));
    const seen = new Set<string>();
    for (const c of claimed) {
      const j = byId.get(c.id);
      if (!j)
        v.push(`claim of ${queue} returned job ${c.id}, which is ${this.jobs.get(c.id)?.state ?? 'unknown'}`);
      else {
        if (c.attempt !== j.attempt + 1)
          v.push(`job ${c.id} claimed as attempt ${c.attempt}, model ${j.attempt + 1}`);
        if (c.runLease !== j.runLease + 1)
          v.push(`job ${c.id} claimed with run lease ${c.runLease}, model ${j.runLease + 1}`);
      }
      if (seen.has(c.id)) v.push(`job ${c.id} returned twice by one claim`);
      seen.add(c.id);
    }
    for (const [lane, list] of lanes) {
      const inOrder = list.filter((j) => !j.late);
      const taken = inOrder.filter((j) => seen.has(j.id));
      const prefix = inOrder.slice(0, taken.length);
      if (taken.some((j, i) => j !== prefix[i]))
        v.push(
          `lane ${lane}: claimed ${taken.map((j) => j.id).join(',')} but the oldest are ${prefix.map((j) => j.id).join(',')}`,
        );
    }
    return v;
  }

  /** The queue's limits in force, or null when it has none (then it is claimed as any queue). */
  limitsOf(queue: string): ModelLimits | null {
    return this.flow.get(queue)?.limits ?? null;
  }

  /** Jobs waiting at a queue's gate. */
  gate(queue: string): ModelJob[] {
    return [...this.jobs.values()].filter((j) => j.queue === queue && j.state === 'available' && j.gated);
  }

  /** What a claim of limited `queue` starts and sends to the gate (flow-control.ts states the rule), of the
   * lane's first `read` rows when given: a claim's pass over a lane stops at the end of a ring slot, so a lane
   * whose next rows lie in the next slot is read in two claims (the caller counts what the receipts read). The jobs
   * sent to the gate are moved there, those started are left for `claimed()`. A queue's lanes here: one (its
   * jobs share a priority and are never COPY-loaded or committed late), so lane order is position order. */
  claimLimited(queue: string, max: number, read?: number): LimitedClaim {
    const flow = this.flow.get(queue)!;
    if (this.paused.has(queue)) return { started: [], gated: [], consumed: 0 };
    const lane = this.laneEntries(queue);
    const res = flow.claim(this.jobs, max, this.gate(queue), lane.slice(0, read ?? lane.length));
    this.consume(queue, lane, res.consumed);
    for (const j of res.gated) {
      // Closed at once as the claim took it: its attempt is not spent, its run lease is.
      j.gated = true;
      j.runLease += 1;
    }
    return res;
  }

  /** A claim of a limited queue while it has no limits: its lane's first `max` rows (or `read`, as above),
   * returning those not cancelled. */
  claimUnlimitedFlow(queue: string, max: number, rows?: number): ModelJob[] {
    if (this.paused.has(queue)) return [];
    const lane = this.laneEntries(queue);
    const read = lane.slice(0, Math.min(max, rows ?? max));
    this.consume(queue, lane, read.length);
    return read.filter((j): j is ModelJob => j !== null);
  }

  /** A limited queue's lane in claim order: its available jobs and its rows cancelled before a claim read them. */
  private laneEntries(queue: string): LaneEntry[] {
    const live = [...this.claimable(queue).values()].flat();
    const entries: { pos: number; job: LaneEntry }[] = [
      ...live.map((j) => ({ pos: j.pos, job: j as LaneEntry })),
      ...(this.cancelledRows.get(queue) ?? []).map((pos) => ({ pos, job: null })),
    ];
    return entries.sort((a, b) => a.pos - b.pos).map((e) => e.job);
  }

  /** The first `n` entries of a lane were read: its cancelled rows among them are passed for good. */
  private consume(queue: string, lane: readonly LaneEntry[], n: number): void {
    const dead = this.cancelledRows.get(queue) ?? [];
    const passed = lane.slice(0, n).filter((e) => e === null).length;
    this.cancelledRows.set(queue, [...dead].sort((a, b) => a - b).slice(passed));
  }

  /** An operator changes a limited queue's limits; with none left, its gate opens: the waiting jobs go back to
   * its lane, oldest first. */
  setLimits(queue: string, limits: ModelLimits | null): void {
    for (const j of this.flow.get(queue)!.setLimits(limits, this.gate(queue))) {
      j.gated = false;
      j.pos = this.takePosition();
      j.late = false;
    }
  }

  claimed(ref: AttemptRef, owner: string): void {
    const j = this.mustGet(ref.jobId);
    j.state = 'running';
    j.gated = false;
    j.attempt += 1;
    j.runLease += 1;
    j.owner = owner;
    j.current = ref;
    this.attempts.set(`${ref.jobId}:${ref.runLease}`, ref);
  }

  /** The fence: a settlement is accepted only for the attempt that is running now, presenting its run lease. */
  accepts(ref: AttemptRef): boolean {
    const j = this.jobs.get(ref.jobId);
    return (
      j?.state === 'running' &&
      j.current !== null &&
      j.current.batchId === ref.batchId &&
      j.current.idx === ref.idx &&
      j.runLease === ref.runLease
    );
  }

  /** Where a failed attempt goes: retried while attempts remain, else failed (or the DLQ in a DLQ queue). */
  private failureRoute(j: ModelJob, outcome: 'retry' | 'failed', attempt: number): JobState {
    if (outcome === 'retry' && attempt < j.maxAttempts) return 'retryable';
    return this.dlqQueues.has(j.queue) ? 'dlq' : 'failed';
  }

  /** A settlement the fence accepted. `due`: the retry or snooze runs at a time already past. */
  settle(ref: AttemptRef, outcome: SettleOutcome, due: boolean): void {
    const j = this.mustGet(ref.jobId);
    j.owner = null;
    j.current = null;
    if (outcome === 'completed') j.state = 'completed';
    else if (outcome === 'cancelled') j.state = 'cancelled';
    else if (outcome === 'snooze') {
      // A snooze is not an attempt: the job waits without spending one.
      j.state = 'scheduled';
      j.attempt -= 1;
      j.due = due;
    } else {
      j.state = this.failureRoute(j, outcome, j.attempt);
      j.due = due;
    }
  }

  /** A registered callback's attempt parks: its receipt member closes, the job waits for the token. */
  park(ref: AttemptRef, token: string): void {
    const j = this.mustGet(ref.jobId);
    j.state = 'waiting_external';
    j.owner = null;
    j.current = null;
    j.token = token;
  }

  /** A callback for a parked job: settles it once; any later use of the token is rejected. */
  callback(
    token: string,
    action: CallbackAction | 'timeout',
  ): { outcome: 'settled' | 'rejected'; job: ModelJob | null } {
    const j = [...this.jobs.values()].find((x) => x.token === token && x.state === 'waiting_external');
    if (!j) return { outcome: 'rejected', job: null };
    j.token = null;
    this.spentTokens.add(token);
    if (action === 'complete') j.state = 'completed';
    else if (action === 'cancel') j.state = 'cancelled';
    else if (action === 'fail') j.state = this.failureRoute(j, 'failed', j.attempt);
    else if (action === 'retry' || action === 'timeout') {
      j.state = this.failureRoute(j, 'retry', j.attempt);
      j.due = false;
    } else {
      // resume: the same attempt runs again, from a new position.
      j.state = 'available';
      j.attempt -= 1;
      j.bulk = false;
      j.pos = this.takePosition();
      j.late = false;
    }
    return { outcome: 'settled', job: j };
  }

  /** Operator cancel: any job that has not ended is cancelled (a running attempt is closed, its result refused). */
  cancel(id: string): JobState | null {
    const j = this.jobs.get(id);
    if (!j || TERMINAL.has(j.state)) return null;
    const from = j.state;
    if (j.token) this.spentTokens.add(j.token);
    // A limited queue's row cancelled in its lane stays there as a tombstone a claim reads (see claimLimited).
    if (from === 'available' && !j.gated && this.flow.has(j.queue))
      this.cancelledRows.set(j.queue, [...(this.cancelledRows.get(j.queue) ?? []), j.pos]);
    j.state = 'cancelled';
    j.gated = false;
    j.owner = null;
    j.current = null;
    j.token = null;
    return from;
  }

  /** Operator retry: a failed, cancelled or dead-lettered job runs again with a fresh attempt count; a deferred
   * one becomes due now. Returns the state it was retried from, or null when refused. */
  retry(id: string): JobState | null {
    const j = this.jobs.get(id);
    if (!j) return null;
    if (j.state === 'scheduled' || j.state === 'retryable') {
      j.due = true;
      return j.state;
    }
    if (j.state !== 'failed' && j.state !== 'cancelled' && j.state !== 'dlq') return null;
    if (j.uniqueKey && this.uniqueHolder(j.uniqueKey)) return null;
    const from = j.state;
    j.state = 'available';
    j.attempt = 0;
    j.bulk = false;
    j.pos = this.takePosition();
    j.late = false;
    return from;
  }

  /** Rescue: every attempt of a silent instance is a failed attempt, retried under the backoff rule (not due yet). */
  rescue(instance: string): string[] {
    const out: string[] = [];
    for (const j of this.jobs.values())
      if (j.state === 'running' && j.owner === instance) {
        j.owner = null;
        j.current = null;
        j.state = this.failureRoute(j, 'retry', j.attempt);
        j.due = false;
        out.push(j.id);
      }
    return out;
  }

  /** Promotion: every due scheduled or retryable job becomes available, at a new position of its live lane. */
  promote(): number {
    let n = 0;
    for (const j of [...this.jobs.values()].sort((a, b) => Number(a.id) - Number(b.id)))
      if ((j.state === 'scheduled' || j.state === 'retryable') && j.due) {
        j.state = 'available';
        j.bulk = false;
        j.pos = this.takePosition();
        j.late = false;
        n++;
      }
    return n;
  }

  /** Time passes: every deferred job is due. */
  advanceClock(): void {
    for (const j of this.jobs.values()) if (j.state === 'scheduled' || j.state === 'retryable') j.due = true;
  }

  running(): ModelJob[] {
    return [...this.jobs.values()].filter((j) => j.state === 'running');
  }

  parked(): ModelJob[] {
    return [...this.jobs.values()].filter((j) => j.state === 'waiting_external');
  }

  /** Per-queue counts as `counts()` reports them (the DLQ is compared entry by entry, not here). */
  counts(queue: string): QueueCountsModel {
    const c = emptyCounts();
    for (const j of this.jobs.values()) {
      if (j.queue !== queue || j.state === 'dlq') continue;
      c[j.state === 'waiting_external' ? 'waiting' : j.state]++;
    }
    return c;
  }

  private mustGet(id: string): ModelJob {
    const j = this.jobs.get(id);
    if (!j) throw new Error(`model: unknown job ${id}`);
    return j;
  }
}
