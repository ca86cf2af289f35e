import { EventEmitter } from 'node:events';
import { AwaError, messageOf } from '../model/errors.js';
import { serverFault, type PruneResult, type RescuedAttempt, type Settlement } from '../storage/index.js';
import type { CronFire } from '../maintenance/cron.js';

// What a worker host tells the application, and how: every event goes through notify(), so a listener that
// throws is reported instead of throwing into the host.

export interface HostEvents {
  /** A non-fatal problem (lost connection, failed flush…); the host carries on. */
  error: [err: unknown];
  /** Something the host does differently from what its options may suggest, and which option changes it
   * (AWA_POLLING_FALLBACK). Once per host; without a listener it goes to stderr. */
  warning: [warning: AwaError];
  /** Each settlement once the database has answered for it; accepted=false means the fence rejected it. */
  settled: [settlement: Settlement, accepted: boolean];
  leadership: [isLeader: boolean];
  prune: [result: PruneResult];
  /** Attempts the leader rescued from silent workers or past deadlines (emitted by the leader's host). */
  rescue: [rescued: RescuedAttempt[]];
  /** A line a pool-thread handler wrote with ctx.log(...). Without a listener it goes to stderr. */
  log: [jobId: string, line: string];
  /** A pool-thread handler's ctx.progress(value); also written through the attempt's fence. */
  progress: [jobId: string, runLease: number, value: unknown];
  /** Cron occurrences the leader fired or skipped (emitted by the leader's host). */
  cron: [fires: CronFire[]];
}

export class HostEmitter extends EventEmitter<HostEvents> {
  protected reportError(err: unknown): void {
    // pg's bare "Query read timeout" or "cannot execute … in a read-only transaction" says nothing of what
    // happened or what to do.
    const reported = serverFault(err);
    if (this.listenerCount('error') > 0) this.notify('error', reported);
    else console.error(`[awa] ${messageOf(reported)}`);
  }

  protected reportWarning(warning: AwaError): void {
    if (this.listenerCount('warning') > 0) this.notify('warning', warning);
    else console.warn(`[awa] warning: ${warning.message}`);
  }

  /**
   * Emits to the application's listeners. A listener that throws must not throw into the host: the emit
   * sits inside a flush, an election or a thread's message handler, and a throw there would skip the rest of
   * that work (a flush's bookkeeping, the leader's maintenance) or end the process. It is reported as an
   * 'error' (AWA_LISTENER_FAILED); one thrown by an 'error' listener goes to stderr.
   */
  protected notify<E extends keyof HostEvents>(event: E, ...args: HostEvents[E]): void {
    try {
      (this.emit as (e: E, ...a: HostEvents[E]) => boolean)(event, ...args);
    } catch (err) {
      if (event === 'error') {
        console.error(`[awa] an 'error' listener threw: ${messageOf(err)}`);
        return;
      }
      this.reportError(
        new AwaError('AWA_LISTENER_FAILED', `A listener of the "${event}" event threw: ${messageOf(err)}`, {
          cause: err,
        }),
      );
    }
  }
}
