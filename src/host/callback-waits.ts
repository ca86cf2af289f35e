import { CallbackTimeout, CancelJob, ExternalFailure, RetryAfter } from '../model/outcomes.js';
import type { callbackResult } from '../storage/index.js';

// Handlers waiting inside an attempt for an external callback (ctx.waitForCallback). The callback is recorded
// on the attempt in the database and announced on the callback channel; a wait also looks in the database
// when it starts (the callback may have come first) and after the LISTEN connection comes back (a
// notification sent meanwhile is lost). Its timeout and its attempt's abort signal end it too.

type Recorded = NonNullable<Awaited<ReturnType<typeof callbackResult>>>;

interface Pending {
  resolve(payload: unknown): void;
  reject(err: unknown): void;
}

export class CallbackWaits {
  private readonly pending = new Map<string, Pending>();

  constructor(
    private readonly read: (jobId: string, runLease: number) => Promise<Recorded | null>,
    private readonly onError: (err: unknown) => void,
    /** A wait ran out its timeout (telemetry). */
    private readonly onTimedOut: () => void = () => {},
  ) {}

  /** Waits for the callback of attempt (jobId, runLease): resolves with its payload (complete, resume), or
   * rejects as the callback or the clock says (fail, retry, cancel, timeout, abort). */
  wait(jobId: string, runLease: number, timeoutMs: number, signal: AbortSignal): Promise<unknown> {
    const key = `${jobId}:${runLease}`;
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        this.pending.delete(key);
        if (timer) clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      };
      const onAbort = () => {
        done();
        reject(signal.reason);
      };
      if (signal.aborted) return reject(signal.reason);
      signal.addEventListener('abort', onAbort);
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          done();
          this.onTimedOut();
          reject(new CallbackTimeout(timeoutMs));
        }, timeoutMs);
      }
      this.pending.set(key, {
        resolve: (v) => (done(), resolve(v)),
        reject: (e) => (done(), reject(e)),
      });
      void this.check(jobId, runLease);
    });
  }

  /** A callback was recorded for (jobId, runLease). */
  notified(jobId: string, runLease: number): void {
    void this.check(jobId, runLease);
  }

  /** After a reconnect: look again for every wait. */
  recheckAll(): void {
    for (const key of this.pending.keys()) {
      const sep = key.indexOf(':');
      void this.check(key.slice(0, sep), Number(key.slice(sep + 1)));
    }
  }

  private async check(jobId: string, runLease: number): Promise<void> {
    const key = `${jobId}:${runLease}`;
    if (!this.pending.has(key)) return;
    let recorded: Recorded | null;
    try {
      recorded = await this.read(jobId, runLease);
    } catch (err) {
      return this.onError(err);
    }
    const p = this.pending.get(key);
    if (!recorded || !p) return;
    const error = recorded.error as { error?: string } | null;
    switch (recorded.action) {
      case 'complete':
      case 'resume':
        return p.resolve(recorded.payload);
      case 'retry': {
        // Without a run time of its own, a plain failure: the attempt retries under the backoff rule.
        if (!recorded.runAt) {
          const retry = new Error(error?.error ?? 'retry requested by callback');
          retry.name = 'ExternalRetry';
          return p.reject(retry);
        }
        const delay = Math.max(0, Date.parse(recorded.runAt) - Date.now());
        return p.reject(new RetryAfter(Math.min(delay, 365 * 86_400_000), 'retry requested by callback'));
      }
      case 'cancel':
        return p.reject(new CancelJob(error?.error ?? 'cancelled by callback'));
      default:
        return p.reject(new ExternalFailure(error?.error ?? 'failed by callback', recorded.payload));
    }
  }
}
