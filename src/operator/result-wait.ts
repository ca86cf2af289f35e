import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import {
  ClientClosedError,
  InvalidOptionError,
  JobNotCompletedError,
  JobNotFoundError,
  ResultTimeoutError,
  type JobLastError,
} from '../model/errors.js';
import { isEnded } from '../model/job-state.js';
import { rejectUnknownKeys, validateInt, validateJobId, validatePlainObject } from '../model/validation.js';
import {
  openDedicated,
  type ConnectionSource,
  type Dedicated,
  type JobOutcome,
  type ResultWaitStore,
} from '../storage/index.js';

// A client's waits for jobs to end (AwaClient.result()): woken by NOTIFY, never by polling. One LISTEN session per
// client, opened at the first wait and shared by all of them, closed by close(). A wait registers here, then
// inserts its waiter row and reads the job (result_wait_begin(): the row makes the statement that ends the job
// notify the result channel), so an end is either read then or heard after. A notification for a job is a hint:
// its outcome is read once for all its waits. When the session is lost, it is opened again (100 ms → 5 s) and every
// job waited for is read again, since what was notified meanwhile is gone. Each wait deletes its row when it ends;
// the leader deletes rows a client that died left behind (after a day).

export interface ResultOptions {
  /** How long to wait for the job to end. Default 60 s; at most 24 days (a timer's limit). */
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 60_000;
/** setTimeout's longest delay (2^31 - 1 ms, about 24.8 days). */
const MAX_TIMEOUT_MS = 2_147_483_647;

/** result()'s arguments, `(job, options?)` or `(kind, job, options?)` (the kind types the result only),
 * validated: the job id and the timeout. */
export function resultWaitOptions(args: unknown[]): [string, { timeoutMs: number }] {
  const typed = args.length >= 2 && isKind(args[0]);
  const job = args[typed ? 1 : 0];
  const options = (args[typed ? 2 : 1] ?? {}) as ResultOptions;
  const id = validateJobId('id', job as string | { id: string });
  validatePlainObject('options', options);
  rejectUnknownKeys('options', options, ['timeoutMs']);
  const timeoutMs =
    options.timeoutMs === undefined
      ? DEFAULT_TIMEOUT_MS
      : validateInt('timeoutMs', options.timeoutMs, 1, MAX_TIMEOUT_MS);
  return [id, { timeoutMs }];
}

function isKind(value: unknown): boolean {
  return typeof value === 'object' && value !== null && 'kind' in value && !('id' in value);
}

/**
 * Where result()'s LISTEN session comes from: the session URL, else the client's own URL, else a connection of
 * the pool passed in (held while the client lives). Behind a transaction pooler with no session URL there is
 * none (a LISTEN there hears nothing), and result() is refused rather than made to poll. `sessionOn` is what the
 * client decided for the other thing that needs a session, migrate(), by the same rule.
 */
export function resultWaitSource(
  sessionOn: { url: string } | 'pool' | null,
  pool: pg.Pool,
): ConnectionSource {
  if (sessionOn === null)
    throw new InvalidOptionError(
      'sessionConnectionString',
      "is required for result() when pooler is 'transaction': result() LISTENs for the job's end, which needs a " +
        'session of its own; pass a postgres:// URL that reaches PostgreSQL directly (not through the pooler)',
    );
  return sessionOn === 'pool' ? { pool } : { connectionString: sessionOn.url };
}

/** Runs a storage call on the client's pool, its errors wrapped as the client's. */
export type RunOnPool = <T>(op: string, fn: (db: pg.Pool | pg.ClientBase) => Promise<T>) => Promise<T>;

interface Wait {
  jobId: string;
  waiter: string;
  resolve(result: unknown): void;
  reject(err: unknown): void;
  timer: NodeJS.Timeout;
  /** The state last read: what a timeout reports. */
  state: string;
}

export class ResultWaits {
  /** Names this client's waiter rows (with a number per wait). */
  private readonly id = randomUUID();
  private seq = 0;
  private readonly waits = new Map<string, Set<Wait>>();
  private conn: Dedicated | null = null;
  private opening: Promise<void> | null = null;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private delayMs = 0;
  private closed = false;

  constructor(
    private readonly source: ConnectionSource,
    private readonly store: ResultWaitStore,
    private readonly run: RunOnPool,
    /** A lost LISTEN session or a failed read (the waits carry on; a timeout ends them at the latest). An
     * AwaClient has no channel to report on, so it passes none. */
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  /** Resolves with job `jobId`'s result once it completes; rejects once it ended otherwise, when it is
   * unknown, or after `timeoutMs`. */
  async wait(jobId: string, timeoutMs: number): Promise<unknown> {
    if (this.closed) throw new ClientClosedError('result');
    // LISTEN first: a notification is heard only by a session that listened before it was sent.
    await this.run('result', () => this.listening());
    return new Promise<unknown>((resolve, reject) => {
      const wait: Wait = {
        jobId,
        waiter: `${this.id}:${++this.seq}`,
        resolve,
        reject,
        state: 'unknown',
        timer: setTimeout(
          () => this.end(wait, () => reject(new ResultTimeoutError(jobId, timeoutMs, wait.state))),
          timeoutMs,
        ),
      };
      // Registered before its row exists: a notification that arrives before result_wait_begin() answers finds it.
      let set = this.waits.get(jobId);
      if (!set) this.waits.set(jobId, (set = new Set()));
      set.add(wait);
      this.run('result', (db) => this.store.resultWaitBegin(db, jobId, wait.waiter)).then(
        (outcome) => {
          if (this.pending(wait)) return this.apply(wait, outcome);
          // Ended meanwhile (its timeout, close()), perhaps before the row it then inserted: delete it.
          void this.deleteRow(wait);
        },
        (err: unknown) => this.end(wait, () => reject(err)),
      );
    });
  }

  /** Ends every wait (ClientClosedError) and the LISTEN session. Their rows are deleted when the pool still
   * answers; the leader's cleanup takes any left. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    const pending = [...this.waits.values()].flatMap((set) => [...set]);
    await Promise.all(
      pending.map((wait) => this.end(wait, () => wait.reject(new ClientClosedError('result')))),
    );
    await this.opening?.catch(() => {});
    await this.conn?.close();
    this.conn = null;
  }

  /** Applies an outcome read for `wait`: settles it when the job ended or is unknown; else it waits on. */
  private apply(wait: Wait, outcome: JobOutcome | null): void {
    if (!this.pending(wait)) return;
    if (outcome === null) return void this.end(wait, () => wait.reject(new JobNotFoundError(wait.jobId)));
    wait.state = outcome.state;
    if (!isEnded(outcome.state)) return;
    if (outcome.state === 'completed') return void this.end(wait, () => wait.resolve(outcome.result));
    const lastError = outcome.lastError as JobLastError | null;
    const state = outcome.state as 'failed' | 'dlq' | 'cancelled';
    void this.end(wait, () => wait.reject(new JobNotCompletedError(wait.jobId, state, lastError)));
  }

  private pending(wait: Wait): boolean {
    return this.waits.get(wait.jobId)?.has(wait) ?? false;
  }

  /** Settles a wait once: forgets it, then deletes its row (a failure there is the cleanup's to mend). */
  private async end(wait: Wait, settle: () => void): Promise<void> {
    const set = this.waits.get(wait.jobId);
    if (!set?.delete(wait)) return;
    if (set.size === 0) this.waits.delete(wait.jobId);
    clearTimeout(wait.timer);
    settle();
    await this.deleteRow(wait);
  }

  private deleteRow(wait: Wait): Promise<void> {
    return this.run('result', (db) => this.store.resultWaitEnd(db, wait.jobId, wait.waiter)).catch(() => {});
  }

  /** Reads the outcome of a job waited for, once for all its waits (after a notification, or a reconnect). */
  private recheck(jobId: string): void {
    if (!this.waits.has(jobId)) return;
    this.run('result', (db) => this.store.jobOutcome(db, jobId)).then(
      (outcome) => {
        for (const wait of [...(this.waits.get(jobId) ?? [])]) this.apply(wait, outcome);
      },
      // A read that failed leaves the waits as they were: the next notification, reconnect or timeout ends them.
      (err: unknown) => this.onError(err),
    );
  }

  /** The LISTEN session, opened on first use; a wait that comes while it is down waits for the next try. */
  private listening(): Promise<void> {
    if (this.conn) return Promise.resolve();
    this.opening ??= this.open().finally(() => (this.opening = null));
    return this.opening;
  }

  private async open(): Promise<void> {
    const conn = await openDedicated(this.source, 'awa-result-listen', (err) => this.lost(err));
    try {
      await this.store.listen(conn.client, (jobId) => this.recheck(jobId));
      // Lost before it was ours (lost() ignored it): keeping it would leave every wait deaf.
      if (conn.lost) throw conn.lost;
    } catch (err) {
      await conn.close();
      throw err;
    }
    if (this.closed) return conn.close();
    this.conn = conn;
    this.delayMs = 0;
  }

  /** Only the established session's loss counts: one lost while opening fails open() (as in the host's Wakeup). */
  private lost(err: Error): void {
    if (!this.conn) return;
    this.conn = null;
    if (this.closed) return;
    this.onError(err);
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    this.delayMs = Math.min(Math.max(this.delayMs * 2, 100), 5_000);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (this.closed) return;
      this.listening().then(
        // Whatever ended while the session was down was notified to nobody: read every job waited for.
        () => {
          for (const jobId of this.waits.keys()) this.recheck(jobId);
        },
        (err: unknown) => {
          if (this.closed) return;
          this.onError(err);
          this.scheduleReconnect();
        },
      );
    }, this.delayMs);
    this.reconnectTimer.unref();
  }
}
