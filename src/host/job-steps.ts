import { AwaError } from '../model/errors.js';
import { Snooze } from '../model/outcomes.js';
import { encodeStepResult } from '../model/payload.js';
import {
  checkStepName,
  DuplicateStepError,
  InvalidStepError,
  MAX_STEPS_PER_JOB,
  sleepRecordName,
  StepLimitError,
} from '../model/steps.js';
import type { AttemptRef, RecordedStep, StepRecord, StepWrite } from '../storage/index.js';
import type { Attempt } from './attempts.js';

// The durable steps of one attempt (ctx.step, ctx.sleep: docs/durable-steps.md). The job's recorded steps are
// read once, at the attempt's first step (not at all on the job's first attempt), so a replay of many steps costs
// one round trip; each step that runs is recorded through the attempt's fence before its value is returned. Only this attempt can record while it
// holds the job, so what was read stays true for it, and a row someone else wrote meanwhile (a stale attempt
// racing on the same name) is what record_step() returns.

export interface StepDeps {
  recordedSteps(jobId: string): Promise<RecordedStep[]>;
  recordStep(a: AttemptRef, w: StepWrite): Promise<StepRecord>;
  /** Ends the attempt now as a snooze until `wakeAt`: no attempt spent, its permit given back. */
  park(attempt: Attempt, wakeAt: Date): void;
}

/** A sleep's record: when it wakes. */
interface SleepRecord {
  wakeAt: string;
}

export class AttemptSteps {
  private recorded: Promise<Map<string, unknown>> | null = null;
  /** The recorded steps once read (and those recorded since). */
  private known: Map<string, unknown> | null = null;
  /** Names begun in this attempt: a second step of one name is the handler's mistake. */
  private readonly begun = new Set<string>();
  private sleeps = 0;

  constructor(
    private readonly attempt: Attempt,
    private readonly ref: AttemptRef,
    private readonly deps: StepDeps,
  ) {}

  async step<T>(name: unknown, fn: unknown): Promise<T> {
    const stepName = checkStepName(name);
    if (typeof fn !== 'function') {
      throw new InvalidStepError('fn', `step ${JSON.stringify(stepName)} needs a function, got ${typeof fn}`);
    }
    return this.once(stepName, async (recorded) => {
      if (recorded.has(stepName)) return recorded.get(stepName) as T;
      this.checkRoom(recorded);
      const value: unknown = await (fn as () => unknown)();
      const resultJson = encodeStepResult(this.attempt.job.kind, value);
      return (await this.record(recorded, stepName, resultJson)) as T;
    });
  }

  /** Sleeps until `wakeAt`, or until the wake time an earlier run recorded under this sleep's name. */
  async sleepUntil(wakeAt: Date, name: string | undefined): Promise<void> {
    if (name !== undefined) checkStepName(name);
    const recordName = sleepRecordName(name, name === undefined ? ++this.sleeps : 0);
    const wake = await this.once(recordName, async (recorded) => {
      if (recorded.has(recordName)) return wakeOf(recorded.get(recordName));
      this.checkRoom(recorded);
      const record: SleepRecord = { wakeAt: wakeAt.toISOString() };
      return wakeOf(await this.record(recorded, recordName, JSON.stringify(record)));
    });
    const delayMs = wake.getTime() - Date.now();
    if (delayMs <= 0) return;
    this.deps.park(this.attempt, wake);
    // The attempt has ended; this unwinds the handler (whatever it does next is ignored, as after a deadline).
    throw new Snooze(delayMs, `sleeping until ${wake.toISOString()}`);
  }

  /** Runs `body` for a name not yet begun in this attempt, on an attempt that still holds its job. A body that
   * records nothing (its function threw) frees the name: the handler may try the step again. */
  private async once<R>(name: string, body: (recorded: Map<string, unknown>) => Promise<R>): Promise<R> {
    if (this.begun.has(name)) throw new DuplicateStepError(name);
    this.begun.add(name);
    try {
      if (this.attempt.settled) throw attemptClosed(this.attempt);
      return await body(await this.load());
    } catch (err) {
      if (!this.known?.has(name)) this.begun.delete(name);
      throw err;
    }
  }

  private load(): Promise<Map<string, unknown>> {
    // Run lease 1 is the job's first claim ever (a lease is never reused, retries and DLQ retries included): no
    // attempt can have recorded a step before it, so the first attempt of every job skips the read.
    if (this.attempt.job.runLease === 1 && !this.recorded) {
      this.known = new Map();
      this.recorded = Promise.resolve(this.known);
    }
    this.recorded ??= this.deps.recordedSteps(this.attempt.job.id).then(
      (steps) => (this.known = new Map(steps.map((s) => [s.name, s.result]))),
      (err: unknown) => {
        this.recorded = null; // read again at the next step
        throw err;
      },
    );
    return this.recorded;
  }

  private checkRoom(recorded: Map<string, unknown>): void {
    if (recorded.size >= MAX_STEPS_PER_JOB) throw new StepLimitError(this.attempt.job.id, MAX_STEPS_PER_JOB);
  }

  private async record(
    recorded: Map<string, unknown>,
    name: string,
    resultJson: string | null,
  ): Promise<unknown> {
    const r = await this.deps.recordStep(this.ref, { name, resultJson, maxSteps: MAX_STEPS_PER_JOB });
    if (r.status !== 'recorded' && r.status !== 'replayed') {
      throw r.status === 'closed'
        ? attemptClosed(this.attempt)
        : new StepLimitError(this.attempt.job.id, MAX_STEPS_PER_JOB);
    }
    recorded.set(name, r.result);
    return r.result;
  }
}

/** What step() and sleep() reject with once their attempt no longer holds the job: the error a lost lease
 * gives every write of an attempt (ctx.registerCallback() too). */
export function attemptClosed(attempt: Attempt): AwaError {
  return new AwaError(
    'AWA_ATTEMPT_CLOSED',
    `Attempt ${attempt.job.runLease} of job ${attempt.job.id} is no longer open (cancelled, rescued, settled or ` +
      'asleep): nothing was recorded.',
  );
}

function wakeOf(record: unknown): Date {
  const at =
    typeof record === 'object' && record !== null ? (record as Partial<SleepRecord>).wakeAt : undefined;
  const wake = new Date(typeof at === 'string' ? at : Number.NaN);
  // Only Awa writes these records; one that does not read as a time is not slept on.
  return Number.isNaN(wake.getTime()) ? new Date(0) : wake;
}
