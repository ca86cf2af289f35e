import type pg from 'pg';
import { PollingFallbackWarning } from '../model/errors.js';
import type { ConnectionSource } from '../storage/index.js';
import type { HostConfig } from './config.js';
import type { LentConnection, WakeupChannel } from './wakeup.js';

// Where a worker host's sessions come from: the LISTEN connection and the maintenance leader's lock each need
// one session for their whole life. sessionConnectionString when given; else the host's own connections,
// unless those lead through a transaction-mode pooler, where no session lasts past a transaction (a LISTEN
// there hears nothing, and a session lock stays behind on a server connection other clients then get). The
// host then does without: it polls, and does not stand for leadership.

/** The source of the host's sessions, or null when it has none (transaction pooler, no session URL). */
export function sessionSource(c: HostConfig, pool: pg.Pool): ConnectionSource | null {
  if (c.sessionConnectionString)
    return { connectionString: c.sessionConnectionString, queryTimeoutMs: c.queryTimeoutMs };
  if (c.pooler === 'transaction') return null;
  return { connectionString: c.connectionString, pool, queryTimeoutMs: c.queryTimeoutMs };
}

/** How often a host with no LISTEN looks up its handlers' callback waits: each is one read, so a host with
 * many waiting handlers must not ask at every queue poll. */
export function callbackPollMs(pollIntervalMs: number): number {
  return Math.max(pollIntervalMs, 1_000);
}

/** What the host tells the application, once, when it has no sessions. */
export function pollingFallbackWarning(c: HostConfig): PollingFallbackWarning {
  return new PollingFallbackWarning(c.pollIntervalMs, callbackPollMs(c.pollIntervalMs), c.maintenance);
}

/**
 * The wake-up side of a host with no session to LISTEN on. The dispatchers' own poll ticks find new jobs;
 * what the callback channel would have announced is looked up here instead, on a timer (`onPoll`). It lends
 * no connection: claims take the pool.
 */
export class PollingWakeup implements WakeupChannel {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly intervalMs: number,
    private readonly onPoll: () => void,
  ) {}

  lend(): LentConnection | null {
    return null;
  }

  async start(): Promise<void> {
    this.timer = setInterval(this.onPoll, this.intervalMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
