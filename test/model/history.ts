// Concurrent histories, the Jepsen way, in one process: producers, claimers and a maintenance leader run at
// once on connections of their own with random delays, while faults are injected (backends terminated, a
// pinned snapshot, a claimer that stops heartbeating, a restarted server when the caller owns one). Every
// operation and what it returned goes into a history; checkHistory() (history-check.ts) proves the
// invariants from it and from the database at the end.
import pg from 'pg';
import type { AwaClient } from '../../src/index.js';
import type { Outcome, Schema, Settlement, Storage } from '../../src/storage/operations.js';
import { ringVariant, type StorageVariant } from '../conformance/variants.js';
import { mulberry32 } from '../chaos/harness.js';
import type { HistoryEntry, HistoryEvent } from './history-events.js';
import { declaredLimits, keyOfUid, limitedReceipts, type HistoryLimits } from './history-limits.js';

export interface HistoryOptions {
  seed: number;
  /** How long producers produce. */
  produceMs: number;
  producers: number;
  claimers: number;
  queues: readonly string[];
  /** Terminate a random backend of the run every so often (0: never). */
  terminateEveryMs: number;
  /** Hold a REPEATABLE READ snapshot open for the whole run. */
  pinSnapshot: boolean;
  /** Restart the server once, mid-run (the caller owns it). */
  restart?: () => Promise<void>;
  /** A claimer stops heartbeating mid-attempt for longer than the rescue window, then tries to settle. */
  stallClaimer: boolean;
  /** Seconds without a heartbeat after which the leader rescues an instance's attempts. */
  stalenessSeconds: number;
  /** Run the in-process maintenance leader (default true; off when worker processes lead). */
  leader?: boolean;
  /** The kind producers enqueue (default 'h'; worker processes need one they run). */
  kind?: string;
  /** Called once, mid-run, while producers produce (e.g. SIGKILL a worker process). */
  midRun?: () => Promise<void>;
  /** A queue of `queues` with limits (docs/flow-control.md): its jobs carry a key, its claimers (in-process)
   * declare the limits, and a sampler reads its receipts and running attempts from the database. */
  limited?: HistoryLimits;
}

export interface HistoryCounters {
  operations: number;
  faults: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The durable steps every attempt that runs steps runs, in order. */
const STEP_NAMES = ['s1', 's2'] as const;

/** A connection that is opened again after the test (or the server) killed it. */
class Conn {
  private c: pg.Client | null = null;
  constructor(
    private readonly url: string,
    readonly name: string,
  ) {}
  async get(): Promise<pg.Client> {
    if (this.c) return this.c;
    for (let i = 0; ; i++) {
      const c = new pg.Client({ connectionString: this.url, application_name: this.name });
      c.on('error', () => {});
      try {
        await c.connect();
        c.on('end', () => {
          if (this.c === c) this.c = null;
        });
        this.c = c;
        return c;
      } catch (err) {
        await c.end().catch(() => {});
        if (i > 200) throw err;
        await sleep(50);
      }
    }
  }
  drop(): void {
    const c = this.c;
    this.c = null;
    void c?.end().catch(() => {});
  }
  async end(): Promise<void> {
    const c = this.c;
    this.c = null;
    await c?.end().catch(() => {});
  }
}

/** True for errors of a connection that died under the statement (terminated, server restarting). */
function connectionLost(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return (
    ['57P01', '57P02', '57P03', '08006', '08003', '08000', 'ECONNRESET', 'ECONNREFUSED', 'EPIPE'].includes(
      e.code ?? '',
    ) || /terminat|Connection terminated|not queryable|ECONNRESET|closed|ended/i.test(e.message ?? '')
  );
}

export class HistoryRun {
  readonly events: HistoryEvent[] = [];
  readonly counters: HistoryCounters = { operations: 0, faults: 0 };
  private producing = true;
  private running = true;
  private readonly rand: () => number;
  private readonly conns: Conn[] = [];
  private seq = 0;
  readonly t0 = Date.now();
  private readonly liveInstances = new Set<string>();
  /** The storage under test: producers go through the client, everything else through this contract. */
  private readonly storage: Storage;

  constructor(
    readonly url: string,
    readonly client: AwaClient,
    readonly schema: Schema,
    readonly opts: HistoryOptions,
    readonly tag: string,
    readonly variant: StorageVariant = ringVariant,
  ) {
    this.rand = mulberry32(opts.seed);
    this.storage = variant.create(schema);
  }

  private record(e: HistoryEntry): void {
    this.events.push({ ...e, t: Date.now() - this.t0, n: this.events.length } as HistoryEvent);
    this.counters.operations++;
  }

  private conn(name: string): Conn {
    const c = new Conn(this.url, `awa-hist-${this.tag}-${name}`);
    this.conns.push(c);
    return c;
  }

  private pause(maxMs: number): Promise<void> {
    return sleep(Math.floor(this.rand() * maxMs));
  }

  async run(): Promise<void> {
    const pinned = this.opts.pinSnapshot ? await this.pin() : null;
    const actors = [
      ...Array.from({ length: this.opts.producers }, (_, i) => this.producer(i)),
      ...Array.from({ length: this.opts.claimers }, (_, i) => this.claimer(i)),
      ...(this.opts.leader === false ? [] : [this.leader()]),
      this.heartbeats(),
      this.faults(),
      ...(this.opts.limited ? [this.sampler(this.opts.limited)] : []),
    ];
    if (this.opts.midRun) {
      await sleep(this.opts.produceMs / 2);
      this.record({ actor: 'faults', op: 'mid_run' });
      this.counters.faults++;
      await this.opts.midRun();
      await sleep(this.opts.produceMs / 2);
    } else await sleep(this.opts.produceMs);
    this.producing = false;
    await Promise.all(actors.slice(0, this.opts.producers));
    // Drain: claimers and the leader run until nothing is left to do.
    await this.waitQuiet();
    this.running = false;
    await Promise.all(actors);
    if (this.opts.limited) {
      // The last receipts; with this process's leader, which reads them before every prune, that is all of them.
      await this.sampleReceipts(await this.conn('final').get(), this.opts.limited);
      if (this.opts.leader !== false) this.record({ actor: 'sampler', op: 'receipts_complete' });
    }
    await pinned?.end().catch(() => {});
    await Promise.all(this.conns.map((c) => c.end()));
  }

  private async pin(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: this.url, application_name: `awa-pin-${this.tag}` });
    c.on('error', () => {});
    await c.connect();
    await c.query('begin isolation level repeatable read');
    await c.query('select txid_current()');
    await c.query(`select count(*) from ${this.schema.ident}.schema_version`);
    this.record({ actor: 'pin', op: 'pin' });
    return c;
  }

  /** Until every queue of the run has nothing available, scheduled, retryable or running for a while. */
  private async waitQuiet(): Promise<void> {
    const deadline = Date.now() + 90_000;
    let quiet = 0;
    while (Date.now() < deadline) {
      try {
        const counts = (await this.client.counts()).filter((c) => this.opts.queues.includes(c.queue));
        const busy = counts.reduce(
          (n, c) => n + c.available + c.scheduled + c.retryable + c.running + c.waiting,
          0,
        );
        quiet = busy === 0 ? quiet + 1 : 0;
        if (quiet >= 3) return;
      } catch {
        quiet = 0;
      }
      await sleep(200);
    }
  }

  private async producer(p: number): Promise<void> {
    const conn = this.conn(`p${p}`);
    for (let i = 0; this.producing; i++) {
      const queue = this.opts.queues[Math.floor(this.rand() * this.opts.queues.length)]!;
      const n = this.rand() < 0.5 ? 1 : 1 + Math.floor(this.rand() * 6);
      const how = n === 1 ? 'one' : this.rand() < 0.3 ? 'copy' : 'many';
      const priority = this.rand() < 0.7 ? 2 : 1;
      const uids = Array.from({ length: n }, (_, k) => `${this.tag}:${p}:${i}:${k}`);
      const rollback = this.rand() < 0.15;
      const kind = this.opts.kind ?? 'h';
      const limited = this.opts.limited?.queue === queue ? this.opts.limited : null;
      const argsOf = (uid: string) => (limited ? { uid, tenant: keyOfUid(uid, limited.keys) } : { uid });
      const inputs = uids.map((uid) => ({
        kind,
        args: argsOf(uid),
        options: { queue, priority: priority as 2, maxAttempts: 3 },
      }));
      let c: pg.Client | null = null;
      let committing = false;
      try {
        c = await conn.get();
        await c.query('begin');
        this.record({
          actor: `p${p}`,
          op: 'enqueue',
          uids,
          queue,
          priority,
          how,
          block: uids.length > 1 && how !== 'one',
        });
        if (how === 'one')
          await this.client.enqueue(kind, argsOf(uids[0]!), { ...inputs[0]!.options, client: c });
        else if (how === 'many') await this.client.enqueueMany(inputs, { client: c });
        else await this.client.copyEnqueue(inputs, { client: c });
        await this.pause(15);
        committing = true;
        await c.query(rollback ? 'rollback' : 'commit');
        this.record({ actor: `p${p}`, op: rollback ? 'rolled_back' : 'committed', uids });
      } catch (err) {
        conn.drop();
        // A commit whose answer was lost may or may not have happened; anything earlier rolled back.
        this.record({
          actor: `p${p}`,
          op: committing && !rollback ? 'commit_unknown' : 'rolled_back',
          uids,
          error: String(err),
        });
        if (!connectionLost(err)) throw err;
      }
      await this.pause(10);
    }
  }

  private newInstance(k: number): string {
    const id = `${this.tag}-c${k}-${++this.seq}`;
    this.liveInstances.add(id);
    return id;
  }

  private async register(conn: Conn, instance: string): Promise<void> {
    for (;;) {
      try {
        await this.storage.instances.registerInstance(
          await conn.get(),
          instance,
          this.opts.queues.map((q) => ({
            queue: q,
            dlq: q.endsWith('dlq'),
            concurrency: 20,
            ...(q === this.opts.limited?.queue ? { limits: declaredLimits(this.opts.limited) } : {}),
          })),
          'history',
        );
        return;
      } catch (err) {
        conn.drop();
        if (!connectionLost(err)) throw err;
        await sleep(50);
      }
    }
  }

  private async claimer(k: number): Promise<void> {
    const conn = this.conn(`c${k}`);
    let instance = this.newInstance(k);
    await this.register(conn, instance);
    let stalled = !this.opts.stallClaimer || k !== 0;
    while (this.running) {
      const queue = this.opts.queues[Math.floor(this.rand() * this.opts.queues.length)]!;
      const max = 1 + Math.floor(this.rand() * 12);
      let batches;
      try {
        batches = (
          await this.storage.claimer.claim(await conn.get(), {
            queue,
            max,
            instanceId: instance,
            agingSeconds: 3600,
            deadlineSeconds: 0,
          })
        ).batches;
      } catch (err) {
        conn.drop();
        if (!connectionLost(err)) throw err;
        // The claim may have committed with its answer lost: this instance goes silent (its attempts are
        // the leader's to rescue) and the claimer carries on as a new one.
        this.record({ actor: `c${k}`, op: 'claim_lost', instance });
        this.liveInstances.delete(instance);
        instance = this.newInstance(k);
        await this.register(conn, instance);
        continue;
      }
      const jobs = batches.flatMap((b) =>
        b.jobs.map((j) => ({
          id: j.id,
          uid: (j.args as { uid: string }).uid,
          runLease: j.runLease,
          attempt: j.attempt,
          ref: { claimSlot: b.claimSlot, batchId: b.batchId, idx: j.idx, jobId: j.id, runLease: j.runLease },
        })),
      );
      this.record({
        actor: `c${k}`,
        op: 'claimed',
        instance,
        queue,
        jobs: jobs.map((j) => ({
          id: j.id,
          uid: j.uid,
          runLease: j.runLease,
          attempt: j.attempt,
          batch: Number(j.ref.batchId),
          idx: j.ref.idx,
        })),
      });
      if (jobs.length === 0) {
        await this.pause(30);
        continue;
      }
      if (!stalled && this.running) {
        // This instance goes silent past the rescue window holding its attempts, then wakes and settles them:
        // the leader's rescue must win, every late settlement must be refused.
        stalled = true;
        this.liveInstances.delete(instance);
        this.record({ actor: `c${k}`, op: 'stall', instance });
        this.counters.faults++;
        await sleep(this.opts.stalenessSeconds * 1000 + 2_500);
      } else await this.pause(20);
      await this.steps(conn, k, jobs);
      // The attempts stop running here, before their settlement is sent: no later than their end in the database.
      this.record({
        actor: `c${k}`,
        op: 'attempts_ended',
        attempts: jobs.map((j) => ({ id: j.id, runLease: j.runLease })),
      });
      const items: Settlement[] = jobs.map((j) => ({ ...j.ref, ...this.outcome(j.attempt) }));
      await this.settle(conn, k, items);
      if (!this.liveInstances.has(instance)) {
        instance = this.newInstance(k);
        await this.register(conn, instance);
      }
      // Now and then a settlement is sent again (a retried flush): the fence must refuse it.
      if (this.rand() < 0.1) await this.settle(conn, k, items.slice(0, 1), true);
    }
  }

  /**
   * Durable steps, as a host runs them (src/host/job-steps.ts, step-recorder.ts): half the attempts read their
   * job's recorded steps, replay those, and run the others, each with its run lease as its value; the records of
   * one step of every attempt go in one record_steps() call, as a host's step recorder groups them. Retries,
   * snoozes, rescues and the stalled claimer's late attempts make later attempts replay or be fenced out.
   */
  private async steps(
    conn: Conn,
    k: number,
    jobs: readonly {
      id: string;
      runLease: number;
      ref: Settlement extends infer S ? Omit<S, 'outcome'> : never;
    }[],
  ): Promise<void> {
    const actor = `c${k}`;
    const running: { job: (typeof jobs)[number]; recorded: Map<string, unknown>; readSent: number }[] = [];
    for (const job of jobs) {
      if (this.rand() < 0.5) continue;
      const readSent = this.events.length;
      try {
        const steps = await this.storage.settler.recordedSteps(await conn.get(), job.id);
        running.push({ job, recorded: new Map(steps.map((s) => [s.name, s.result])), readSent });
      } catch (err) {
        conn.drop();
        if (!connectionLost(err)) throw err;
      }
    }
    for (const name of STEP_NAMES) {
      const run: typeof running = [];
      for (const r of running) {
        const base = { actor, id: r.job.id, runLease: r.job.runLease, name };
        if (r.recorded.has(name)) this.record({ ...base, op: 'step_replayed', result: r.recorded.get(name) });
        else {
          this.record({ ...base, op: 'step_run', readSent: r.readSent });
          run.push(r);
        }
      }
      if (run.length === 0) continue;
      const sent = this.events.length;
      let answers;
      try {
        answers = await this.storage.settler.recordSteps(
          await conn.get(),
          run.map((r) => ({
            attempt: r.job.ref,
            write: { name, resultJson: JSON.stringify(r.job.runLease), maxSteps: 10 },
          })),
        );
      } catch (err) {
        conn.drop();
        if (!connectionLost(err)) throw err;
        for (const r of run)
          this.record({ actor, op: 'step_unknown', id: r.job.id, runLease: r.job.runLease, name });
        return; // the handlers' step() rejected: their attempts end here
      }
      run.forEach((r, i) => {
        const a = answers[i]!;
        this.record({
          actor,
          op: 'step_recorded',
          id: r.job.id,
          runLease: r.job.runLease,
          name,
          sent,
          status: a.status,
          result: 'result' in a ? a.result : null,
        });
        // An attempt that no longer holds its job gets a rejected step() and runs no further step.
        if (a.status === 'closed') running.splice(running.indexOf(r), 1);
      });
    }
  }

  private outcome(attempt: number): { outcome: Outcome; runAt?: Date; error?: Record<string, unknown> } {
    const x = this.rand();
    const past = new Date(Date.now() - 1_000);
    if (x < 0.7) return { outcome: 'completed' };
    if (x < 0.82) return { outcome: 'retry', runAt: past, error: { message: `retry at ${attempt}` } };
    if (x < 0.9) return { outcome: 'snooze', runAt: past };
    if (x < 0.95) return { outcome: 'failed', error: { message: 'failed' } };
    return { outcome: 'cancelled', error: { message: 'cancelled' } };
  }

  private async settle(conn: Conn, k: number, items: Settlement[], resend = false): Promise<void> {
    for (let tries = 0; ; tries++) {
      // What the history held when the write was sent: a later claim of the job recorded before it proves
      // the write stale.
      const sent = this.events.length;
      try {
        const accepted = await this.storage.settler.settleAttempts(await conn.get(), items);
        this.record({
          actor: `c${k}`,
          op: 'settled',
          sent,
          resend: resend || tries > 0,
          items: items.map((s) => ({
            id: s.jobId,
            runLease: s.runLease,
            outcome: s.outcome,
            accepted: accepted.has(s.jobId),
          })),
        });
        return;
      } catch (err) {
        conn.drop();
        if (!connectionLost(err)) throw err;
        // Unknown whether that flush committed: sent again through the fence, as the batcher does.
        this.record({
          actor: `c${k}`,
          op: 'settle_unknown',
          items: items.map((s) => ({
            id: s.jobId,
            runLease: s.runLease,
            outcome: s.outcome,
            accepted: false,
          })),
        });
        if (tries > 20) throw err;
        await sleep(20);
      }
    }
  }

  private async heartbeats(): Promise<void> {
    const conn = this.conn('hb');
    while (this.running) {
      try {
        const c = await conn.get();
        await this.variant.hooks.setHeartbeatAge(c, this.schema, [...this.liveInstances], 0);
      } catch (err) {
        conn.drop();
        if (!connectionLost(err)) throw err;
      }
      await sleep(250);
    }
  }

  private async leader(): Promise<void> {
    const conn = this.conn('leader');
    while (this.running) {
      try {
        const c = await conn.get();
        // Draining: time passes for the backlog (retries of rescued attempts wait out the backoff rule).
        // (Not a limited queue's: the jobs at its gate are deferred rows never due, which this would make due.)
        if (!this.producing)
          await this.variant.hooks.setDeferredDue(
            c,
            this.schema,
            { queues: this.opts.queues.filter((q) => q !== this.opts.limited?.queue), pendingOnly: true },
            0,
          );
        const promoted = await this.storage.maintenance.promoteDue(c, 1000);
        if (promoted > 0) this.record({ actor: 'leader', op: 'promoted', count: promoted });
        const rescueSentT = Date.now() - this.t0;
        const rescued = await this.storage.maintenance.rescue(c, {
          stalenessSeconds: this.opts.stalenessSeconds,
          maxBatches: 1000,
        });
        if (rescued.length > 0)
          this.record({
            actor: 'leader',
            op: 'rescued',
            sentT: rescueSentT,
            items: rescued.map((r) => ({
              id: r.jobId,
              runLease: r.runLease,
              outcome: r.outcome,
              accepted: true,
              instance: r.instanceId,
            })),
          });
        if (this.rand() < 0.5) {
          const slot = await this.storage.maintenance.rotate(c);
          if (slot !== null) this.record({ actor: 'leader', op: 'rotated', slot });
        }
        const pruned = await this.pruneAfterSampling(c);
        if (pruned.outcome === 'pruned' || pruned.outcome === 'carried')
          this.record({ actor: 'leader', op: 'pruned', slot: pruned.slot, outcome: pruned.outcome });
        // Tallies race the claimers' receipts (a claim that read the current slot just before a rotation);
        // the final counts and pages must not be able to tell.
        await this.storage.maintenance.tallySlots(c, 10);
      } catch (err) {
        conn.drop();
        if (!connectionLost(err) && !/lock timeout|canceling statement/i.test(String(err))) throw err;
      }
      await this.pause(60);
    }
  }

  /**
   * What the database recorded for a limited queue, read every 50 ms on a connection of its own: each receipt
   * of the queue's lanes once (its claim time and the members it started; members the claim sent to the gate
   * are closed 'settled' at that very time, so they are left out), and the running attempts per key (the jobs
   * view). Receipts go once their slot is pruned, so they are read while the run goes on.
   */
  private async sampler(l: HistoryLimits): Promise<void> {
    const conn = this.conn('sampler');
    while (this.running) {
      try {
        const c = await conn.get();
        await this.sampleReceipts(c, l);
        const running = await c.query<{ key: string; n: number }>(
          `select coalesce(args ->> 'tenant', '') as key, count(*)::int as n
             from ${this.schema.ident}.jobs where state = 'running' and queue = $1 group by 1`,
          [l.queue],
        );
        this.record({
          actor: 'sampler',
          op: 'running_sampled',
          byKey: Object.fromEntries(running.rows.map((r) => [r.key, r.n])),
        });
      } catch (err) {
        conn.drop();
        if (!connectionLost(err)) throw err;
      }
      await sleep(50);
    }
  }

  /**
   * Prunes the ring. With a limited queue, first reads its receipts, in the prune's transaction and under the
   * queue's 'limits' lock (claim_limited() takes it first): no claim of the queue commits between the read and
   * the prune, so no receipt, nor the ready rows its members name, goes unread. The history then has every start.
   */
  private async pruneAfterSampling(c: pg.Client) {
    const prune = () =>
      this.storage.maintenance.prune(c, { lockTimeoutMs: 10, carryLimit: 200, carryAfterSlots: 4 });
    const l = this.opts.limited;
    if (!l) return prune();
    await c.query('begin');
    try {
      await c.query(`select pg_advisory_xact_lock(${this.schema.ident}.lock_ns('limits'), hashtext($1))`, [
        l.queue,
      ]);
      await this.sampleReceipts(c, l);
      const pruned = await prune();
      await c.query('commit');
      return pruned;
    } catch (err) {
      await c.query('rollback').catch(() => {});
      throw err;
    }
  }

  /** Receipts of the limited queue already recorded, by lane, batch and claim time. */
  private readonly receiptsSeen = new Set<string>();

  /** Records each receipt of the limited queue not recorded yet: its claim time and the members it started. */
  private async sampleReceipts(c: pg.ClientBase, l: HistoryLimits): Promise<void> {
    const rows = await limitedReceipts(c, this.schema, l.queue);
    for (const r of rows) {
      if (this.receiptsSeen.has(r.receipt)) continue;
      this.receiptsSeen.add(r.receipt);
      this.record({
        actor: 'sampler',
        op: 'receipt',
        atUs: Number(r.at_us),
        jobs: r.jobs.map(([id, key]) => ({ id, key })),
      });
    }
  }

  private async faults(): Promise<void> {
    const admin = this.conn('faults');
    let restarted = !this.opts.restart;
    const began = Date.now();
    while (this.running) {
      await sleep(this.opts.terminateEveryMs > 0 ? this.opts.terminateEveryMs * (0.5 + this.rand()) : 200);
      if (!this.running) break;
      if (!restarted && this.producing && Date.now() - began > this.opts.produceMs / 2) {
        restarted = true;
        this.record({ actor: 'faults', op: 'restart' });
        this.counters.faults++;
        await this.opts.restart!();
        continue;
      }
      if (this.opts.terminateEveryMs <= 0) continue;
      try {
        const c = await admin.get();
        const { rows } = await c.query<{ pid: number; app: string }>(
          `select pid, application_name as app from pg_stat_activity
            where datname = current_database() and application_name like $1
              and application_name not like '%-faults' and pid <> pg_backend_pid()
            order by random() limit 1`,
          [`awa-hist-${this.tag}-%`],
        );
        if (rows[0]) {
          await c.query('select pg_terminate_backend($1)', [rows[0].pid]);
          this.record({ actor: 'faults', op: 'terminate', target: rows[0].app });
          this.counters.faults++;
        }
      } catch (err) {
        admin.drop();
        if (!connectionLost(err)) throw err;
      }
    }
  }
}
