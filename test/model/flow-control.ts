// Flow control in the reference model (docs/flow-control.md, sql/functions/engine/limit_claim.sql): which jobs a
// claim of a limited queue starts, which it sends to the gate, and what holds a key's or the queue's slots.
// No SQL and no clock: a rate here has a period far longer than any model run (an hour), so every start it
// logged is still inside its window, and "starts in the window" is a count. Sliding windows are checked as
// invariants of the concurrent histories instead (history-check.ts, limitsHeld).
import type { ModelJob } from './model.js';

/** A rate whose window never slides during a run: `limit` starts, then none until the limits change. */
export const MODEL_RATE_PERIOD_MS = 3_600_000;

/** The limits a claim applies (the engine's effective limits, in the model's terms). */
export interface ModelLimits {
  keyConcurrency?: number;
  /** Strict FIFO per key (concurrency 1): a job that will run again keeps its key's slot. */
  fifo?: boolean;
  keyRate?: number;
  queueConcurrency?: number;
  queueRate?: number;
}

/** The limits as the engine's effective_limits() writes them (defaults filled in), for comparison. */
export function limitsJson(l: ModelLimits | null, keyArg: string): unknown {
  if (!l) return null;
  const rate = (limit: number) => ({ burst: limit, limit, periodMs: MODEL_RATE_PERIOD_MS });
  const perKey = {
    ...(l.keyConcurrency !== undefined ? { concurrency: l.keyConcurrency } : {}),
    ...(l.keyRate !== undefined ? { rate: rate(l.keyRate) } : {}),
    ...(l.fifo !== undefined ? { fifo: l.fifo } : {}),
  };
  const queue = {
    ...(l.queueConcurrency !== undefined ? { concurrency: l.queueConcurrency } : {}),
    ...(l.queueRate !== undefined ? { rate: rate(l.queueRate) } : {}),
  };
  return {
    key: { arg: keyArg },
    ...(Object.keys(perKey).length > 0 ? { perKey } : {}),
    ...(Object.keys(queue).length > 0 ? { queue } : {}),
  };
}

/** One member of a claim's receipt that started: its job, key, and the run lease it ran at. */
interface Member {
  jobId: string;
  key: string;
  runLease: number;
}

/** What one claim of a limited queue does, in the order the engine returns it. */
export interface LimitedClaim {
  /** Let through the gate (one receipt, job id order), then fresh rows that may run (lane order). */
  started: ModelJob[];
  /** Fresh rows sent to the gate. */
  gated: ModelJob[];
  /** Lane entries the claim's receipts read (its first ones), cancelled rows included. */
  consumed: number;
}

/** A lane entry: a job's row, or null for a row cancelled before any claim reached it (a tombstone, which a
 * claim reads as one of its `max` rows and returns nothing for). */
export type LaneEntry = ModelJob | null;

const byId = (a: ModelJob, b: ModelJob) => Number(a.id) - Number(b.id);

/** What the limited claims of a process's runs did, so a run can show that it exercised the gate. */
export const flowCoverage = { claims: 0, admitted: 0, gated: 0, heldRuns: 0, fullClaims: 0, fifoClaims: 0 };
export function resetFlowCoverage(): void {
  for (const k of Object.keys(flowCoverage) as (keyof typeof flowCoverage)[]) flowCoverage[k] = 0;
}

/** One limited queue's state: its limits, the slots held, the rates' logs. */
export class FlowControl {
  limits: ModelLimits | null;
  /** Holds as the engine keeps them, one per receipt that started jobs: written by the claim, given back by a
   * later claim of the queue once none of its members holds a slot (see holding()). */
  private holds: Member[][] = [];
  /** Starts logged per key while a per-key rate was in force, and of the queue while a queue rate was. */
  private keyStarts = new Map<string, number>();
  private queueStarts = 0;

  constructor(
    readonly queue: string,
    readonly declared: ModelLimits,
  ) {
    this.limits = declared;
  }

  /**
   * A member holds its slot while it is its job's running attempt; under strict FIFO also while its job will
   * run again: deferred (retry, snooze), at the gate (there the slot is the job's own, not counted: see
   * used()), or back in a lane and not claimed yet. Only a job's latest start holds: an earlier member of the
   * job, in a receipt kept by its other members, holds nothing.
   */
  private holding(m: Member, jobs: ReadonlyMap<string, ModelJob>): boolean {
    const j = jobs.get(m.jobId);
    if (!j) return false;
    const latest = Math.max(
      ...this.holds
        .flat()
        .filter((x) => x.jobId === m.jobId)
        .map((x) => x.runLease),
    );
    if (m.runLease !== latest) return false;
    if (j.state === 'running') return j.runLease === m.runLease;
    return (
      this.limits?.fifo === true &&
      (j.state === 'scheduled' || j.state === 'retryable' || j.state === 'available')
    );
  }

  /** The members that hold a slot and count against their key and the queue: not those parked at the gate. */
  private used(jobs: ReadonlyMap<string, ModelJob>): Member[] {
    return this.holds.flat().filter((m) => this.holding(m, jobs) && !jobs.get(m.jobId)!.gated);
  }

  /** The running attempts holding a slot (what queueLimits() reads as running). */
  running(jobs: ReadonlyMap<string, ModelJob>): Member[] {
    return this.holds
      .flat()
      .filter((m) => jobs.get(m.jobId)?.state === 'running' && jobs.get(m.jobId)!.runLease === m.runLease);
  }

  /** The limits change (an operator's override, or its reset). With none left the gate opens: its jobs go
   * back to the lane, oldest first (returned). Holds stay until a claim gives them back. */
  setLimits(limits: ModelLimits | null, gatedJobs: ModelJob[]): ModelJob[] {
    this.limits = limits;
    return limits ? [] : [...gatedJobs].sort(byId);
  }

  /** Starts the rate in force still allows. */
  private rateRoom(limit: number | undefined, logged: number): number {
    return limit === undefined ? Infinity : Math.max(0, limit - logged);
  }

  private keyRateRoom(key: string): number {
    return this.rateRoom(this.limits!.keyRate, this.keyStarts.get(key) ?? 0);
  }

  /** How many attempts a claim could start now, before its `max`. */
  roomNow(jobs: ReadonlyMap<string, ModelJob>): number {
    return this.queueRoom(this.used(jobs).length);
  }

  private queueRoom(used: number): number {
    const l = this.limits!;
    const conc = l.queueConcurrency === undefined ? Infinity : l.queueConcurrency - used;
    return Math.max(0, Math.min(conc, this.rateRoom(l.queueRate, this.queueStarts)));
  }

  /** A receipt's starts: its hold row, and an entry in each rate's log. */
  private record(started: readonly ModelJob[]): void {
    const l = this.limits!;
    if (started.length === 0) return;
    this.holds.push(started.map((j) => ({ jobId: j.id, key: j.key, runLease: j.runLease + 1 })));
    for (const j of started)
      if (l.keyRate !== undefined) this.keyStarts.set(j.key, (this.keyStarts.get(j.key) ?? 0) + 1);
    if (l.queueRate !== undefined) this.queueStarts += started.length;
  }

  /**
   * The claim rule. First the hold rows none of whose members holds are given back; the attempts holding a
   * slot (not parked at the gate) are read once and kept up to date through the claim. The claim's room is the
   * least of `max` and the queue's room. Jobs waiting at the gate go first: per key the oldest (job id) up to
   * the key's room (every key's room read before any of them starts), then overall oldest first up to the
   * claim's room. Then one pass over the lane's fresh rows (see below). Mutates only this state; the caller
   * moves the jobs.
   */
  claim(
    jobs: ReadonlyMap<string, ModelJob>,
    max: number,
    gate: readonly ModelJob[],
    lane: readonly LaneEntry[],
  ): LimitedClaim {
    const fifo = this.limits!.fifo === true;
    this.holds = this.holds.filter((row) => row.some((m) => this.holding(m, jobs)));
    const used = this.used(jobs).map((m) => ({ jobId: m.jobId, key: m.key }));
    const slots = (key: string) =>
      this.limits!.keyConcurrency === undefined
        ? Infinity
        : this.limits!.keyConcurrency - used.filter((u) => u.key === key).length;
    let left = Math.min(max, this.queueRoom(used.length));
    flowCoverage.claims++;
    if (fifo) flowCoverage.fifoClaims++;
    if (left === 0) flowCoverage.fullClaims++;
    const started: ModelJob[] = [];
    const gated: ModelJob[] = [];
    if (left > 0) {
      const keys = [...new Set(gate.map((j) => j.key))];
      const rooms = new Map(keys.map((k) => [k, Math.min(slots(k), this.keyRateRoom(k))]));
      const picked = keys
        .flatMap((k) =>
          gate
            .filter((j) => j.key === k)
            .sort(byId)
            .slice(0, Math.max(0, rooms.get(k)!)),
        )
        .sort(byId)
        .slice(0, left);
      this.record(picked);
      used.push(...picked.map((j) => ({ jobId: j.id, key: j.key })));
      flowCoverage.admitted += picked.length;
      started.push(...picked);
      left -= picked.length;
    }
    const waiting = new Set(gate.filter((j) => !started.includes(j)).map((j) => j.key));
    // One pass over the lane: as many rows as the room left, or at least 64 while jobs wait at the gate (cancelled
    // rows count among them). Per key, under strict FIFO a row whose job holds the key's slot goes first in it;
    // any other fits when no job of its key waits at the gate and the key has room, counting those before it.
    // Rows that fit run, in lane order, while the claim's room lasts; every other row goes to the gate.
    let next = 0;
    if (left > 0) {
      const read = lane.slice(0, waiting.size > 0 ? Math.max(left, 64) : left);
      next = read.length;
      const receipt = read.filter((j): j is ModelJob => j !== null);
      const isHeld = (j: ModelJob) => fifo && used.some((u) => u.jobId === j.id);
      const fits = new Set<ModelJob>();
      for (const key of new Set(receipt.map((j) => j.key))) {
        const members = receipt.filter((j) => j.key === key);
        const held = members.filter(isHeld);
        const room = Math.min(slots(key) + held.length, this.keyRateRoom(key));
        [...held, ...members.filter((j) => !isHeld(j))].forEach((j, rank) => {
          if ((isHeld(j) || !waiting.has(key)) && rank < room) fits.add(j);
        });
      }
      const ran = receipt.filter((j) => fits.has(j)).slice(0, left);
      flowCoverage.heldRuns += ran.filter(isHeld).length;
      flowCoverage.gated += receipt.length - ran.length;
      this.record(ran);
      started.push(...ran);
      gated.push(...receipt.filter((j) => !ran.includes(j)));
    }
    return { started, gated, consumed: next };
  }

  /** Per key: attempts holding a slot, jobs at the gate, and (with a per-key rate in force) logged starts:
   * what queueLimits() lists, busiest first. */
  keysState(
    jobs: ReadonlyMap<string, ModelJob>,
    gate: readonly ModelJob[],
  ): { key: string; running: number; waiting: number; recentStarts?: number }[] {
    const by = new Map<string, { running: number; waiting: number }>();
    const entry = (k: string) => by.get(k) ?? by.set(k, { running: 0, waiting: 0 }).get(k)!;
    for (const m of this.running(jobs)) entry(m.key).running++;
    for (const j of gate) entry(j.key).waiting++;
    return [...by]
      .map(([key, s]) => ({
        key,
        ...s,
        ...(this.limits?.keyRate !== undefined ? { recentStarts: this.keyStarts.get(key) ?? 0 } : {}),
      }))
      .sort(
        (a, b) =>
          b.running - a.running || b.waiting - a.waiting || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0),
      );
  }
}
