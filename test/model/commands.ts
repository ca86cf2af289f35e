// The commands of a model-based run. Each runs one operation against the engine and the model side by side,
// compares what the operation returned, then compares everything observable (checkObservable). Targets are
// picked by index modulo what exists when the command runs, so a shrunk sequence stays meaningful. toString()
// is the command's constructor call: a failure prints a sequence that replays as it is (see run-model.ts).
import fc from 'fast-check';
import type { Settlement } from '../../src/storage/operations.js';
import { KEY_ARG, type PendingJob, type Real } from './engine.js';
import { limitsJson, MODEL_RATE_PERIOD_MS, type ModelLimits } from './flow-control.js';
import {
  CALLBACK_ACTIONS,
  emptyCounts,
  type AttemptRef,
  type CallbackAction,
  type ModelJob,
  type QueueModel,
  TERMINAL,
} from './model.js';

export type ModelCommand = fc.AsyncCommand<QueueModel, Real>;

class CheckFailed extends Error {}

function expectEqual(what: string, actual: unknown, expected: unknown): void {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new CheckFailed(`${what}: engine ${a}, model ${e}`);
}

/** JSON with every object's keys sorted: jsonb reorders them. */
function canonical(x: unknown): string {
  return JSON.stringify(x, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}

function fail(violations: string[]): void {
  if (violations.length > 0) throw new CheckFailed(violations.join('\n'));
}

const pick = <T>(xs: readonly T[], i: number): T | undefined =>
  xs.length === 0 ? undefined : xs[i % xs.length];
const byId = (a: { id: string }, b: { id: string }) => Number(a.id) - Number(b.id);

/** Everything observable agrees with the model: each job's state, attempt and run lease (getJob), every
 * queue's counts (available at least the model's: positions of producers in flight or rolled back count
 * until a claim passes them, see Quiesce), and the DLQ. */
export async function checkObservable(m: QueueModel, r: Real): Promise<void> {
  const jobs = [...m.jobs.values()];
  const records = await Promise.all(jobs.map((j) => r.db.client.getJob(j.id)));
  const v: string[] = [];
  jobs.forEach((j, i) => {
    const rec = records[i];
    if (!rec) v.push(`getJob(${j.id}) is null; model ${j.state}`);
    else if (rec.state !== j.state || rec.attempt !== j.attempt || rec.runLease !== j.runLease)
      v.push(
        `getJob(${j.id}): engine ${rec.state} attempt ${rec.attempt} lease ${rec.runLease}, model ${j.state} attempt ${j.attempt} lease ${j.runLease}`,
      );
  });
  const counts = await r.db.client.counts();
  for (const q of m.queues) {
    const c = counts.find((x) => x.queue === q);
    const want = m.counts(q);
    const got = c ? { ...c, available: Math.max(0, c.available) } : emptyCounts();
    for (const k of Object.keys(want) as (keyof typeof want)[]) {
      if (k === 'available' ? got[k] < want[k] : got[k] !== want[k])
        v.push(`counts(${q}).${k}: engine ${got[k]}, model ${want[k]}`);
    }
    if ((c?.paused ?? false) !== m.paused.has(q)) v.push(`counts(${q}).paused: engine ${c?.paused}`);
    const dlq = (await r.db.client.listDlq({ queue: q, limit: 1000 })).map((d) => d.id).sort();
    const wantDlq = jobs
      .filter((j) => j.queue === q && j.state === 'dlq')
      .map((j) => j.id)
      .sort();
    if (JSON.stringify(dlq) !== JSON.stringify(wantDlq)) v.push(`dlq(${q}): engine ${dlq}, model ${wantDlq}`);
    // The running and completed pages read the ring's receipts, or a slot's tally once it has one.
    for (const state of ['running', 'completed'] as const) {
      const listed = (await r.db.client.listJobs({ state, queue: q, limit: 1000 })).map((j) => j.id).sort();
      const want = jobs
        .filter((j) => j.queue === q && j.state === state)
        .map((j) => j.id)
        .sort();
      if (JSON.stringify(listed) !== JSON.stringify(want))
        v.push(`listJobs(${state}, ${q}): engine ${listed}, model ${want}`);
    }
  }
  for (const [q, flow] of m.flow) {
    // What the limits hold now: attempts holding a slot, jobs at the gate, per key the same and its logged starts.
    const [state] = await r.db.client.queueLimits({ queue: q, keys: 100 });
    const gate = m.gate(q);
    const want = {
      effective: limitsJson(flow.limits, KEY_ARG),
      running: flow.running(m.jobs).length,
      waiting: gate.length,
      keys: flow.keysState(m.jobs, gate),
    };
    const got = {
      effective: state?.effective ?? null,
      running: state?.running,
      waiting: state?.waiting,
      keys: (state?.keys ?? []).map((k) => ({
        key: k.key,
        running: k.running,
        waiting: k.waiting,
        ...(flow.limits?.keyRate !== undefined ? { recentStarts: k.recentStarts } : {}),
      })),
    };
    if (canonical(got) !== canonical(want))
      v.push(`queueLimits(${q}): engine ${canonical(got)}, model ${canonical(want)}`);
  }
  fail(v);
}

/** Counts the steps the open transaction has lived through (a job it commits later may run after later ones),
 * holds back what waits out the backoff rule, then compares everything observable. */
async function step(m: QueueModel, r: Real): Promise<void> {
  if (r.tx) r.txSteps++;
  await holdBackoff(m, r);
  await checkObservable(m, r);
}

/**
 * A retry without a time of its own (a flush's, a rescue's, a callback's or its timeout's) waits out the backoff
 * rule: 2^attempt s plus up to 25 %. Each such job must not be due yet and must be due within that bound; then
 * the test moves it an hour out, so that whether the next promotion takes it does not depend on how long the
 * steps take (the model says it is not due until the clock is advanced).
 */
async function holdBackoff(m: QueueModel, r: Real): Promise<void> {
  const waiting = [...m.jobs.values()].filter(
    (j) => (j.state === 'retryable' || j.state === 'scheduled') && !j.due,
  );
  if (waiting.length === 0) return;
  const { hooks } = r.db.variant;
  const rows = await hooks.deferredDueIn(
    r.db.pool,
    r.db.schema,
    waiting.map((j) => j.id),
  );
  const v: string[] = [];
  const held: string[] = [];
  for (const row of rows) {
    const j = m.jobs.get(row.id)!;
    if (row.secs <= 0) v.push(`job ${j.id} (${j.state}) is due already; model: not yet`);
    else if (row.secs < 600) {
      if (row.secs > 1.25 * 2 ** j.attempt + 0.5)
        v.push(
          `job ${j.id} waits ${row.secs.toFixed(1)} s after attempt ${j.attempt}: beyond the backoff rule`,
        );
      held.push(j.id);
    }
  }
  fail(v);
  if (held.length > 0) await hooks.setDeferredDue(r.db.pool, r.db.schema, { ids: held }, 3_600);
}

type TxMode = 'auto' | 'commit' | 'rollback' | 'open';
type Runs = 'now' | 'later';

/** Enqueue: one job (`enqueue`), several (`enqueueMany`) or a COPY load (`copyEnqueue`, the bulk lane); on its
 * own transaction, in a caller transaction that commits or rolls back at once, or one left open across steps. */
export class Enqueue implements ModelCommand {
  constructor(
    readonly how: 'one' | 'many' | 'copy',
    readonly queue: number,
    readonly priority: number,
    readonly n: number,
    readonly mode: TxMode,
    readonly runs: Runs,
    readonly maxAttempts: number,
    readonly unique: number | null,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const queue = m.queues[this.queue % m.queues.length]!;
    const n = this.how === 'one' ? 1 : this.n;
    // A unique key only on a job of its own transaction: two open transactions racing one key wait for each other.
    const key =
      this.how === 'one' && this.mode === 'auto' && this.unique !== null ? `${r.run}-u${this.unique}` : null;
    const bulk = this.how === 'copy';
    const scheduled = this.runs === 'later' && !bulk;
    const uids = Array.from({ length: n }, () => r.nextUid());
    const options = {
      queue,
      priority: this.priority as 1 | 2,
      maxAttempts: this.maxAttempts,
      ...(scheduled ? { runAt: new Date(Date.now() + 3_600_000) } : {}),
      ...(key ? { unique: { key } } : {}),
    };
    const positions = uids.map(() => m.takePosition());
    const txc = this.mode === 'auto' ? null : await r.beginTx();
    const opt = txc ? { client: txc } : {};
    let ids: (string | null)[];
    if (this.how === 'one') {
      const res = await r.db.client.enqueue('m', { uid: uids[0] }, { ...options, ...opt });
      if (key) {
        const holder = m.uniqueHolder(key);
        expectEqual(`unique enqueue ${key} inserted`, res.inserted, holder === null);
        if (holder) {
          expectEqual(`unique enqueue ${key} holder`, res.id, holder.id);
          return step(m, r);
        }
      }
      ids = [res.id];
    } else if (this.how === 'many') {
      const res = await r.db.client.enqueueMany(
        uids.map((uid) => ({ kind: 'm', args: { uid }, options })),
        opt,
      );
      ids = res.map((x) => x.id);
    } else {
      const res = await r.db.client.copyEnqueue(
        uids.map((uid) => ({ kind: 'm', args: { uid }, options })),
        txc ? { client: txc, chunkSize: 3 } : { chunkSize: 3 },
      );
      expectEqual('copyEnqueue inserted', res.inserted, n);
      ids = uids.map(() => null);
    }
    const jobs = uids.map((uid, i) => ({
      id: ids[i]!,
      uid,
      queue,
      priority: this.priority,
      bulk,
      maxAttempts: this.maxAttempts,
      pos: positions[i]!,
      scheduled,
    }));
    if (this.mode === 'open') r.txJobs.push(...jobs);
    else if (this.mode === 'rollback') await r.endTx('rollback');
    else {
      if (this.mode === 'commit') {
        // Anything already pending on the transaction commits with these.
        r.txJobs.push(...jobs);
        await commitPending(m, r);
      } else await addJobs(m, r, jobs, false, key);
    }
    return step(m, r);
  }
  toString(): string {
    return `new Enqueue(${JSON.stringify(this.how)}, ${this.queue}, ${this.priority}, ${this.n}, ${JSON.stringify(this.mode)}, ${JSON.stringify(this.runs)}, ${this.maxAttempts}, ${this.unique})`;
  }
}

async function addJobs(
  m: QueueModel,
  r: Real,
  jobs: readonly PendingJob[],
  late: boolean,
  key: string | null = null,
): Promise<void> {
  const missing = jobs.filter((j) => j.id === null).map((j) => j.uid);
  const found = missing.length > 0 ? await r.idsByUid(missing) : new Map<string, string>();
  for (const j of jobs) {
    const id = j.id ?? found.get(j.uid);
    if (!id) throw new CheckFailed(`committed COPY job ${j.uid} not found`);
    m.addCommitted({ ...j, id, late, uniqueKey: key });
  }
}

async function commitPending(m: QueueModel, r: Real): Promise<void> {
  const late = r.txSteps > 0;
  const jobs = await r.endTx('commit');
  await addJobs(m, r, jobs, late);
}

/** The keys a limited job may carry: an args field (`tenant`), none (the key ''), or a key given at enqueue
 * (`limitKey`), which wins over the args field. */
const LIMIT_KEYS = [
  { tenant: 'k0' },
  { tenant: 'k0' },
  { tenant: 'k1' },
  {},
  { tenant: 'k0', limitKey: 'k1' },
] as const;

/** Enqueue into the run's limited queue: one job or several, committed or rolled back at once, each with a
 * key. (One priority, no COPY, no transaction left open: so its lane order is its enqueue order, and the model
 * can say exactly which jobs each claim starts.) */
export class EnqueueLimited implements ModelCommand {
  constructor(
    readonly keys: readonly number[],
    readonly rollback: boolean,
    readonly maxAttempts: number,
  ) {}
  check(m: QueueModel): boolean {
    return m.flow.size > 0;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const queue = [...m.flow.keys()][0]!;
    const jobs = this.keys.map((k) => {
      const { tenant, limitKey } = LIMIT_KEYS[k % LIMIT_KEYS.length]! as {
        tenant?: string;
        limitKey?: string;
      };
      return {
        uid: r.nextUid(),
        key: limitKey ?? tenant ?? '',
        args: tenant === undefined ? {} : { [KEY_ARG]: tenant },
        options: { queue, maxAttempts: this.maxAttempts, ...(limitKey ? { limitKey } : {}) },
      };
    });
    const positions = jobs.map(() => m.takePosition());
    const c = this.rollback ? await r.beginTx() : null;
    const opt = c ? { client: c } : {};
    const ids =
      jobs.length === 1
        ? [
            (
              await r.db.client.enqueue(
                'm',
                { uid: jobs[0]!.uid, ...jobs[0]!.args },
                { ...jobs[0]!.options, ...opt },
              )
            ).id,
          ]
        : (
            await r.db.client.enqueueMany(
              jobs.map((j) => ({ kind: 'm', args: { uid: j.uid, ...j.args }, options: j.options })),
              opt,
            )
          ).map((x) => x.id);
    if (this.rollback) {
      // Anything else pending on the caller transaction rolls back with these.
      await r.endTx('rollback');
      return step(m, r);
    }
    jobs.forEach((j, i) =>
      m.addCommitted({
        id: ids[i]!,
        queue,
        priority: 2,
        bulk: false,
        maxAttempts: this.maxAttempts,
        pos: positions[i]!,
        scheduled: false,
        late: false,
        key: j.key,
      }),
    );
    return step(m, r);
  }
  toString(): string {
    return `new EnqueueLimited(${JSON.stringify(this.keys)}, ${this.rollback}, ${this.maxAttempts})`;
  }
}

/** The operator overrides a limited queue's limits (or resets the override): what each variant sets, and the
 * limits then in force. 'off' lifts every limit, which opens the gate. */
export const LIMIT_OVERRIDES = {
  reset: null,
  'no-rate': { perKey: { rate: null } },
  tight: { perKey: { concurrency: 1 }, queue: { concurrency: 1 } },
  wide: { perKey: { concurrency: 2, rate: null }, queue: { concurrency: null } },
  'queue-rate': { queue: { rate: { limit: 6, periodMs: MODEL_RATE_PERIOD_MS } } },
  fifo: { perKey: { fifo: true } },
  off: { perKey: null, queue: null },
} as const;
export type LimitOverride = keyof typeof LIMIT_OVERRIDES;

const fifoOf = (l: ModelLimits): ModelLimits => (l.fifo !== undefined ? { fifo: l.fifo } : {});

function overridden(declared: ModelLimits, o: LimitOverride): ModelLimits | null {
  switch (o) {
    case 'reset':
      return declared;
    // An override replaces the fields it names and keeps the others: a declared strict FIFO stays.
    case 'no-rate':
      return {
        keyConcurrency: declared.keyConcurrency!,
        queueConcurrency: declared.queueConcurrency!,
        ...fifoOf(declared),
      };
    case 'tight':
      return { ...declared, keyConcurrency: 1, queueConcurrency: 1 };
    case 'wide':
      return { keyConcurrency: 2, ...fifoOf(declared) };
    case 'queue-rate':
      return { ...declared, queueRate: 6 };
    case 'fifo':
      return { ...declared, keyConcurrency: 1, fifo: true };
    case 'off':
      return null;
  }
}

export class SetLimits implements ModelCommand {
  constructor(readonly override: LimitOverride) {}
  check(m: QueueModel): boolean {
    return m.flow.size > 0;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const [queue, flow] = [...m.flow][0]!;
    const want = overridden(flow.declared, this.override);
    const effective = await r.db.client.setQueueLimits(
      queue,
      LIMIT_OVERRIDES[this.override] as Parameters<typeof r.db.client.setQueueLimits>[1],
    );
    expectEqual(
      `setQueueLimits(${queue}, ${this.override})`,
      canonical(effective),
      canonical(limitsJson(want, KEY_ARG)),
    );
    m.setLimits(queue, want);
    return step(m, r);
  }
  toString(): string {
    return `new SetLimits(${JSON.stringify(this.override)})`;
  }
}

/** Ends the caller transaction left open by earlier steps. */
export class EndTx implements ModelCommand {
  constructor(readonly how: 'commit' | 'rollback') {}
  check(): boolean {
    return true;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    if (this.how === 'commit') await commitPending(m, r);
    else await r.endTx('rollback');
    return step(m, r);
  }
  toString(): string {
    return `new EndTx(${JSON.stringify(this.how)})`;
  }
}

/** A claim of one queue by one instance: checked against the claim contract, then the model follows it. */
export class Claim implements ModelCommand {
  constructor(
    readonly queue: number,
    readonly max: number,
    readonly instance: number,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    await claimInto(m, r, this.queue, this.max, this.instance);
    return step(m, r);
  }
  toString(): string {
    return `new Claim(${this.queue}, ${this.max}, ${this.instance})`;
  }
}

/** Claims, checks the claim against the model and lets the model follow it. Returns what the claim moved: the
 * jobs it started and, of a limited queue, the lane rows it read. */
async function claimInto(m: QueueModel, r: Real, q: number, max: number, inst: number): Promise<number> {
  const queue = m.queues[q % m.queues.length]!;
  const instance = r.instances[inst % r.instances.length]!;
  const flowQueue = m.flow.has(queue);
  const mark = flowQueue ? await receiptMark(r) : '0';
  const res = await r.db.storage.claimer.claim(r.db.pool, {
    queue,
    max,
    instanceId: instance,
    agingSeconds: 3600,
    deadlineSeconds: 0,
  });
  const read = flowQueue ? await rowsRead(r, queue, mark) : undefined;
  if (res.contended) throw new CheckFailed(`claim of ${queue} found a lane held, with no other claimer`);
  const claimed = res.batches.flatMap((b) =>
    b.jobs.map((j) => ({
      id: j.id,
      attempt: j.attempt,
      runLease: j.runLease,
      ref: { claimSlot: b.claimSlot, batchId: b.batchId, idx: j.idx, jobId: j.id, runLease: j.runLease },
    })),
  );
  if (m.limitsOf(queue)) {
    // A limited queue's claim is predicted exactly: which jobs start, in which order, at which attempt.
    const want = m.claimLimited(queue, max, read).started;
    expectEqual(
      `claim of limited ${queue} (max ${max}) started`,
      claimed.map((c) => `${c.id}@${c.attempt}/${c.runLease}`),
      want.map((j) => `${j.id}@${j.attempt + 1}/${j.runLease + 1}`),
    );
  } else if (m.flow.has(queue)) {
    // The limited queue with its limits lifted: its one lane, read as any claim reads it.
    expectEqual(
      `claim of ${queue} with no limits (max ${max}) started`,
      claimed.map((c) => `${c.id}@${c.attempt}/${c.runLease}`),
      m.claimUnlimitedFlow(queue, max, read).map((j) => `${j.id}@${j.attempt + 1}/${j.runLease + 1}`),
    );
  } else fail(m.checkClaim(queue, claimed));
  if (claimed.length > max) throw new CheckFailed(`claim of ${max} returned ${claimed.length}`);
  for (const c of claimed) m.claimed(c.ref, instance);
  // A limited queue's claim that sent every row it read to the gate started nothing, but it moved its lane on.
  return claimed.length + (read ?? 0);
}

/** The newest receipt's id before a claim. */
async function receiptMark(r: Real): Promise<string> {
  const { rows } = await r.db.pool.query<{ id: string }>(
    `select coalesce(max(batch_id), 0)::text as id from ${r.db.schema.ident}.claim_batches`,
  );
  return rows[0]!.id;
}

/** How many rows of a limited queue's lane (its shard -1 gate lane aside) the receipts after `mark` read: their
 * members and the cancelled rows inside their ranges. A claim's pass stops at the end of a ring slot, which the
 * model does not know: it takes the rows the claim read and predicts what became of each. */
async function rowsRead(r: Real, queue: string, mark: string): Promise<number> {
  const s = r.db.schema.ident;
  const { rows } = await r.db.pool.query<{ n: number }>(
    `select coalesce(sum(b.size + (select count(*) from ${s}.ready_tombstones t
                                    where t.lane_id = b.lane_id and t.lane_seq between b.first_seq and b.last_seq)), 0)::int as n
       from ${s}.claim_batches b join ${s}.lanes l on l.lane_id = b.lane_id
      where l.queue = $1 and l.shard >= 0 and b.batch_id > $2::bigint`,
    [queue, mark],
  );
  return rows[0]!.n;
}

export type FinishOutcome =
  'completed' | 'retry' | 'retry-due' | 'retry-backoff' | 'failed' | 'cancelled' | 'snooze' | 'snooze-due';

/** One settle flush: several running attempts settled at once, each with its own outcome. */
export class Settle implements ModelCommand {
  constructor(readonly items: readonly (readonly [number, FinishOutcome])[]) {}
  check(m: QueueModel): boolean {
    return m.running().length > 0;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const running = m.running().sort(byId);
    const chosen = new Map<string, { job: ModelJob; outcome: FinishOutcome }>();
    for (const [i, outcome] of this.items) {
      const job = pick(running, i)!;
      if (!chosen.has(job.id)) chosen.set(job.id, { job, outcome });
    }
    const items: Settlement[] = [...chosen.values()].map(({ job, outcome }) =>
      settlementOf(job.current!, outcome),
    );
    const accepted = await r.db.storage.settler.settleAttempts(r.db.pool, items);
    expectEqual('settle accepted', [...accepted].sort(), [...chosen.keys()].sort());
    for (const { job, outcome } of chosen.values()) {
      const [base, when] = outcome.split('-') as [string, string | undefined];
      m.settle(job.current!, base as 'completed', when === 'due');
    }
    return step(m, r);
  }
  toString(): string {
    return `new Settle(${JSON.stringify(this.items)})`;
  }
}

function settlementOf(ref: AttemptRef, outcome: FinishOutcome): Settlement {
  const [base, when] = outcome.split('-') as [Settlement['outcome'], string | undefined];
  const runAt =
    when === 'due'
      ? new Date(Date.now() - 1_000)
      : when === 'backoff'
        ? undefined
        : base === 'retry' || base === 'snooze'
          ? new Date(Date.now() + 3_600_000)
          : undefined;
  return {
    ...ref,
    outcome: base,
    ...(runAt ? { runAt } : {}),
    ...(base === 'completed' ? {} : { error: { message: `model ${outcome}` } }),
  };
}

/** A settlement from an attempt that is no longer the running one (settled, rescued, cancelled, superseded by
 * a later claim): the fence must refuse it and change nothing. */
export class StaleSettle implements ModelCommand {
  constructor(
    readonly i: number,
    readonly outcome: FinishOutcome,
  ) {}
  check(m: QueueModel): boolean {
    return [...m.attempts.values()].some((a) => !m.accepts(a));
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const stale = [...m.attempts.values()].filter((a) => !m.accepts(a));
    const ref = pick(stale, this.i)!;
    const accepted = await r.db.storage.settler.settleAttempts(r.db.pool, [settlementOf(ref, this.outcome)]);
    expectEqual(`stale settlement of ${ref.jobId} at lease ${ref.runLease} accepted`, [...accepted], []);
    return step(m, r);
  }
  toString(): string {
    return `new StaleSettle(${this.i}, ${JSON.stringify(this.outcome)})`;
  }
}

/** A running attempt registers a callback and parks (WaitForCallback). */
export class Park implements ModelCommand {
  constructor(readonly i: number) {}
  check(m: QueueModel): boolean {
    return m.running().length > 0;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const job = pick(m.running().sort(byId), this.i)!;
    const ref = job.current!;
    const token = await r.db.storage.settler.registerCallback(r.db.pool, ref, 3_600_000);
    if (!token)
      throw new CheckFailed(`registerCallback refused the open attempt ${ref.jobId}:${ref.runLease}`);
    const accepted = await r.db.storage.settler.settleAttempts(r.db.pool, [{ ...ref, outcome: 'wait' }]);
    expectEqual(`park of ${ref.jobId} accepted`, [...accepted], [ref.jobId]);
    m.park(ref, token);
    return step(m, r);
  }
  toString(): string {
    return `new Park(${this.i})`;
  }
}

/** A callback for a parked job (or, with `spent`, a token already used or whose attempt ended: rejected). */
export class Callback implements ModelCommand {
  constructor(
    readonly i: number,
    readonly action: CallbackAction | 'timeout',
    readonly spent: boolean,
  ) {}
  check(m: QueueModel): boolean {
    return this.spent ? m.spentTokens.size > 0 : m.parked().length > 0;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const token = this.spent
      ? pick([...m.spentTokens].sort(), this.i)!
      : pick(m.parked().sort(byId), this.i)!.token!;
    const c = r.db.client;
    if (this.action === 'timeout') {
      const job = [...m.jobs.values()].find((j) => j.token === token);
      if (job) await r.db.variant.hooks.expireCallbackTimeout(r.db.pool, r.db.schema, job.id);
      const expired = await r.db.storage.maintenance.expireCallbacks(r.db.pool, 1000);
      const want = m.callback(token, 'timeout');
      expectEqual(
        'callbacks expired',
        expired.map((e) => e.jobId),
        want.job ? [want.job.id] : [],
      );
      return step(m, r);
    }
    const delivery =
      this.action === 'complete'
        ? await c.completeExternal(token, { ok: true })
        : this.action === 'fail'
          ? await c.failExternal(token, 'model fail')
          : this.action === 'retry'
            ? await c.retryExternal(token, {})
            : this.action === 'cancel'
              ? await c.cancelExternal(token)
              : await c.resumeExternal(token, { again: true });
    const want = m.callback(token, this.action);
    expectEqual(`callback ${this.action} outcome`, delivery.outcome, want.outcome);
    return step(m, r);
  }
  toString(): string {
    return `new Callback(${this.i}, ${JSON.stringify(this.action)}, ${this.spent})`;
  }
}

/** Operator cancel of any job the run knows. */
export class Cancel implements ModelCommand {
  constructor(readonly i: number) {}
  check(m: QueueModel): boolean {
    return m.jobs.size > 0;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const job = pick([...m.jobs.values()].sort(byId), this.i)!;
    const from = await r.db.client.cancel(job.id);
    expectEqual(`cancel(${job.id}) from`, from, m.cancel(job.id));
    return step(m, r);
  }
  toString(): string {
    return `new Cancel(${this.i})`;
  }
}

/** Operator retry of any job the run knows. */
export class RetryJob implements ModelCommand {
  constructor(readonly i: number) {}
  check(m: QueueModel): boolean {
    return [...m.jobs.values()].some((j) => !j.gated);
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    // Not a job waiting at a limited queue's gate: retry_job() takes it for a deferred job and makes it due
    // (reported as retried from 'available'), which the model refuses. Left out until the engine refuses it too.
    const job = pick([...m.jobs.values()].filter((j) => !j.gated).sort(byId), this.i)!;
    const res = await r.db.client.retryJob(job.id);
    expectEqual(`retryJob(${job.id}) from`, res.retried ? res.from : null, m.retry(job.id));
    return step(m, r);
  }
  toString(): string {
    return `new RetryJob(${this.i})`;
  }
}

/** An instance stops heartbeating; the leader's rescue fails its open attempts (retried under backoff). */
export class LoseHeartbeat implements ModelCommand {
  constructor(readonly instance: number) {}
  check(): boolean {
    return true;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const instance = r.instances[this.instance % r.instances.length]!;
    const { hooks } = r.db.variant;
    await hooks.setHeartbeatAge(r.db.pool, r.db.schema, [instance], 3_600);
    const rescued = await r.db.storage.maintenance.rescue(r.db.pool, {
      stalenessSeconds: 600,
      maxBatches: 10_000,
    });
    await hooks.setHeartbeatAge(r.db.pool, r.db.schema, [instance], 0);
    expectEqual(`rescued of ${instance}`, rescued.map((x) => x.jobId).sort(), m.rescue(instance).sort());
    return step(m, r);
  }
  toString(): string {
    return `new LoseHeartbeat(${this.instance})`;
  }
}

/** Maintenance steps: promotion, time passing for the backlog, ring rotation and prune, pause and resume. */
export class Maintain implements ModelCommand {
  constructor(
    readonly what: 'promote' | 'clock' | 'rotate' | 'prune' | 'prune-carry' | 'tally' | 'pause' | 'resume',
    readonly queue = 0,
  ) {}
  check(): boolean {
    return true;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    const { pool, schema, client, variant } = r.db;
    const store = r.db.storage.maintenance;
    const queue = m.queues[this.queue % m.queues.length]!;
    switch (this.what) {
      case 'promote':
        expectEqual('promoted', await store.promoteDue(pool, 10_000), m.promote());
        break;
      case 'clock': {
        // By id: jobs at a limited queue's gate are deferred rows too, never due by time.
        const deferred = [...m.jobs.values()]
          .filter((j) => j.state === 'scheduled' || j.state === 'retryable')
          .map((j) => j.id);
        await variant.hooks.setDeferredDue(pool, schema, { ids: deferred }, -1);
        m.advanceClock();
        break;
      }
      case 'rotate':
        await store.rotate(pool);
        break;
      case 'prune':
        await store.prune(pool, { lockTimeoutMs: 20, carryLimit: 0, carryAfterSlots: 16 });
        break;
      case 'prune-carry':
        await store.prune(pool, { lockTimeoutMs: 20, carryLimit: 1_000, carryAfterSlots: 2 });
        break;
      case 'tally':
        await store.tallySlots(pool, 20);
        break;
      case 'pause':
        expectEqual(`pauseQueue(${queue})`, await client.pauseQueue(queue), !m.paused.has(queue));
        m.paused.add(queue);
        break;
      case 'resume':
        expectEqual(`resumeQueue(${queue})`, await client.resumeQueue(queue), m.paused.has(queue));
        m.paused.delete(queue);
        break;
    }
    return step(m, r);
  }
  toString(): string {
    return `new Maintain(${JSON.stringify(this.what)}, ${this.queue})`;
  }
}

/** Claims every queue that is not paused until two claims in a row find nothing, then requires the counts to be
 * exact: with no producer in flight, no position of a rolled-back producer may still count as available. */
export class Quiesce implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(m: QueueModel, r: Real): Promise<void> {
    if (r.tx) await commitPending(m, r);
    for (let q = 0; q < m.queues.length; q++) {
      if (m.paused.has(m.queues[q]!)) continue;
      // Dry: two claims in a row that moved nothing (the first finds the lane drained and marks it, the next
      // passes the positions rolled back at its tail).
      for (let empty = 0, i = 0; empty < 2; i++) {
        if (i > 50) throw new CheckFailed(`claims of ${m.queues[q]} never ran dry`);
        empty = (await claimInto(m, r, q, 50, 0)) === 0 ? empty + 1 : 0;
      }
    }
    await checkObservable(m, r);
    const counts = await r.db.client.counts();
    for (const q of m.queues) {
      if (m.paused.has(q)) continue; // nothing claims a paused queue, so nothing passes its rolled-back positions
      const got = counts.find((c) => c.queue === q)?.available ?? 0;
      const flow = m.limitsOf(q) ? m.flow.get(q)! : null;
      if (flow) {
        // A limited queue's claims run dry with jobs left at its gate, or in its lane while it has no room (no
        // claim then reads its lane, so rolled-back positions count until one does).
        if (flow.roomNow(m.jobs) > 0)
          expectEqual(`counts(${q}).available once quiet`, got, m.counts(q).available);
        continue;
      }
      expectEqual(`counts(${q}).available once quiet`, got, m.counts(q).available);
      // Claims that run dry leave nothing behind (a cancelled row may cost one claim its turn, never a job).
      expectEqual(`available jobs of ${q} left by claims that ran dry`, got, 0);
    }
  }
  toString(): string {
    return 'new Quiesce()';
  }
}

const outcomeArb = fc.constantFrom<FinishOutcome>(
  'completed',
  'completed',
  'retry',
  'retry-due',
  'retry-backoff',
  'failed',
  'cancelled',
  'snooze',
  'snooze-due',
);

/** The generators of every command, weighted toward the steps that move jobs. */
export function commandArbs(): fc.Arbitrary<ModelCommand>[] {
  const idx = fc.nat({ max: 40 });
  const enqueue = fc
    .record({
      how: fc.constantFrom('one', 'one', 'many', 'copy'),
      queue: fc.nat({ max: 1 }),
      priority: fc.integer({ min: 1, max: 2 }),
      n: fc.integer({ min: 2, max: 5 }),
      mode: fc.constantFrom<TxMode>('auto', 'auto', 'commit', 'rollback', 'open'),
      runs: fc.constantFrom<Runs>('now', 'now', 'now', 'later'),
      maxAttempts: fc.integer({ min: 1, max: 3 }),
      unique: fc.option(fc.nat({ max: 2 }), { freq: 3 }),
    })
    .map(
      (e) =>
        new Enqueue(
          e.how as 'one',
          e.queue,
          e.priority,
          e.n,
          e.mode,
          e.runs,
          e.maxAttempts,
          e.unique,
        ) as ModelCommand,
    );
  const enqueueLimited = fc
    .record({
      keys: fc.array(fc.nat({ max: LIMIT_KEYS.length - 1 }), { minLength: 2, maxLength: 6 }),
      rollback: fc.constantFrom(false, false, false, true),
      maxAttempts: fc.integer({ min: 1, max: 3 }),
    })
    .map((e) => new EnqueueLimited(e.keys, e.rollback, e.maxAttempts) as ModelCommand);
  return [
    enqueue,
    enqueue,
    enqueue,
    fc.constantFrom<'commit' | 'rollback'>('commit', 'rollback').map((h) => new EndTx(h) as ModelCommand),
    fc
      .tuple(fc.nat({ max: 2 }), fc.integer({ min: 1, max: 6 }), fc.nat({ max: 1 }))
      .map(([q, max, i]) => new Claim(q, max, i) as ModelCommand),
    fc
      .tuple(fc.nat({ max: 2 }), fc.integer({ min: 1, max: 6 }), fc.nat({ max: 1 }))
      .map(([q, max, i]) => new Claim(q, max, i) as ModelCommand),
    // The limited queue (queue 2): enqueues with keys, claims, and the operator's overrides.
    enqueueLimited,
    enqueueLimited,
    fc.constant(2).map((q) => new Claim(q, 6, 0) as ModelCommand),
    fc
      .constantFrom<LimitOverride>(...(Object.keys(LIMIT_OVERRIDES) as LimitOverride[]))
      .map((o) => new SetLimits(o) as ModelCommand),
    fc
      .array(fc.tuple(idx, outcomeArb), { minLength: 1, maxLength: 4 })
      .map((items) => new Settle(items) as ModelCommand),
    fc
      .array(fc.tuple(idx, outcomeArb), { minLength: 1, maxLength: 4 })
      .map((items) => new Settle(items) as ModelCommand),
    fc.tuple(idx, outcomeArb).map(([i, o]) => new StaleSettle(i, o) as ModelCommand),
    idx.map((i) => new Park(i) as ModelCommand),
    fc
      .tuple(idx, fc.constantFrom<CallbackAction | 'timeout'>(...CALLBACK_ACTIONS, 'timeout'), fc.boolean())
      .map(([i, a, s]) => new Callback(i, a, s) as ModelCommand),
    idx.map((i) => new Cancel(i) as ModelCommand),
    idx.map((i) => new RetryJob(i) as ModelCommand),
    fc.nat({ max: 1 }).map((i) => new LoseHeartbeat(i) as ModelCommand),
    fc
      .tuple(
        fc.constantFrom(
          'promote',
          'clock',
          'rotate',
          'rotate',
          'prune',
          'prune-carry',
          'tally',
          'pause',
          'resume',
        ),
        fc.nat({ max: 2 }),
      )
      .map(([w, q]) => new Maintain(w as 'promote', q) as ModelCommand),
    fc.constant(new Quiesce() as ModelCommand),
  ];
}

/** The commands of a run about the limited queue (queue 2): its enqueues, claims by either instance, every
 * way an attempt ends (settlements of every outcome, rescue, cancel, a parked callback), operator retry,
 * promotion and time, pause, the operator's overrides, and Quiesce. Its slots are taken and given back far
 * more often than in the mixed runs of commandArbs(). */
export function limitedCommandArbs(opts: { fifo?: boolean } = {}): fc.Arbitrary<ModelCommand>[] {
  const idx = fc.nat({ max: 40 });
  const enqueueLimited = fc
    .record({
      keys: fc.array(fc.nat({ max: LIMIT_KEYS.length - 1 }), { minLength: 2, maxLength: 6 }),
      rollback: fc.constantFrom(false, false, false, true),
      maxAttempts: fc.integer({ min: 1, max: 3 }),
    })
    .map((e) => new EnqueueLimited(e.keys, e.rollback, e.maxAttempts) as ModelCommand);
  const claim = fc
    .tuple(fc.integer({ min: 1, max: 6 }), fc.nat({ max: 1 }))
    .map(([max, i]) => new Claim(2, max, i) as ModelCommand);
  const settle = fc
    .array(fc.tuple(idx, outcomeArb), { minLength: 1, maxLength: 3 })
    .map((items) => new Settle(items) as ModelCommand);
  const retryDue = idx.map((i) => new Settle([[i, 'retry-due']]) as ModelCommand);
  const promote = fc.constant(new Maintain('promote', 2) as ModelCommand);
  return [
    enqueueLimited,
    enqueueLimited,
    enqueueLimited,
    claim,
    claim,
    claim,
    claim,
    settle,
    settle,
    settle,
    fc.nat({ max: 1 }).map((i) => new LoseHeartbeat(i) as ModelCommand),
    idx.map((i) => new Cancel(i) as ModelCommand),
    idx.map((i) => new RetryJob(i) as ModelCommand),
    idx.map((i) => new Park(i) as ModelCommand),
    fc
      .tuple(idx, fc.constantFrom<CallbackAction | 'timeout'>(...CALLBACK_ACTIONS, 'timeout'))
      .map(([i, a]) => new Callback(i, a, false) as ModelCommand),
    fc
      .constantFrom('promote', 'promote', 'clock', 'rotate', 'prune', 'pause', 'resume')
      .map((w) => new Maintain(w as 'promote', 2) as ModelCommand),
    fc
      .constantFrom<LimitOverride>(...(Object.keys(LIMIT_OVERRIDES) as LimitOverride[]))
      .map((o) => new SetLimits(o) as ModelCommand),
    fc.constant(new Quiesce() as ModelCommand),
    // With strict FIFO, a job that failed and retries keeps its key's slot and runs again in it: more retries
    // that are due at once, and more promotions to bring them back, while the run is young.
    ...(opts.fifo ? [retryDue, retryDue, promote, promote] : []),
  ];
}

export { TERMINAL };
