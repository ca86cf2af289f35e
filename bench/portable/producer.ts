import type { AwaClient, JobKind } from '../../src/index.js';
import { Pacer, sleep } from '../pace.js';
import type { PortableConfig } from './config.js';
import { log } from './emit.js';

// The producer loop: every PRODUCER_BATCH_MS it works out how many jobs are owed and inserts them in
// batches of at most PRODUCER_BATCH_MAX (one enqueueMany statement each). What is owed depends on the mode:
//   harness pacing: exactly the sum of the `ENQUEUE <n>` lines received, nothing else;
//   fixed:          rate × real elapsed wall-clock time (Pacer), so stalls are made up, not forgotten;
//   depth-target:   whatever tops the queue back up to TARGET_DEPTH.
// A failed insert (database down, backend terminated) keeps the jobs owed and backs off; nothing is lost
// or double-counted because only committed batches are counted.

export interface PortableArgs {
  produced_at_ms: number;
  pad: string;
}

/** JSON of the args without padding is about this long; padding brings it to JOB_PAYLOAD_BYTES. */
const ARGS_OVERHEAD = 40;

export class Producer {
  enqueued = 0;
  private harnessOwed = 0;
  private readonly pacer: Pacer;
  private stopped = false;
  private knownDepth = 0;
  private sinceDepth = 0;
  private readonly pad: string;
  private lastErrorLog = 0;

  constructor(
    private readonly cfg: PortableConfig,
    private readonly client: AwaClient,
    private readonly kind: JobKind<PortableArgs>,
  ) {
    this.pacer = new Pacer(cfg.producerRate);
    this.pad = 'x'.repeat(Math.max(0, cfg.payloadBytes - ARGS_OVERHEAD));
  }

  /** A harness `ENQUEUE <n>` line. */
  requestHarness(n: number): void {
    this.harnessOwed += n;
  }

  setRate(rate: number): void {
    this.pacer.setRate(rate);
  }

  /** Latest queue depth (depth-target mode tops up against it). */
  observeDepth(depth: number): void {
    this.knownDepth = depth;
    this.sinceDepth = 0;
  }

  stop(): void {
    this.stopped = true;
  }

  private owed(): number {
    if (this.cfg.harnessPacing) return this.harnessOwed;
    if (this.cfg.producerMode === 'depth-target') {
      return Math.max(0, this.cfg.targetDepth - this.knownDepth - this.sinceDepth);
    }
    return this.pacer.owed();
  }

  private sent(n: number): void {
    this.enqueued += n;
    if (this.cfg.harnessPacing) this.harnessOwed -= n;
    else if (this.cfg.producerMode === 'depth-target') this.sinceDepth += n;
    else this.pacer.sent(n);
  }

  async run(): Promise<void> {
    let backoffMs = 0;
    while (!this.stopped) {
      let owed = this.owed();
      while (owed > 0 && !this.stopped) {
        const n = Math.min(owed, this.cfg.batchMax);
        const producedAt = Date.now();
        const jobs = Array.from({ length: n }, () => ({
          kind: this.kind,
          args: { produced_at_ms: producedAt, pad: this.pad },
        }));
        try {
          await this.client.enqueueMany(jobs);
          this.sent(n);
          owed -= n;
          backoffMs = 0;
        } catch (err) {
          this.logError(err);
          backoffMs = Math.min(Math.max(backoffMs * 2, 100), 2_000);
          break;
        }
      }
      await sleep(backoffMs || this.cfg.batchMs);
    }
  }

  private logError(err: unknown): void {
    const now = Date.now();
    if (now - this.lastErrorLog < 2_000) return;
    this.lastErrorLog = now;
    log(`enqueue failed (will retry): ${err instanceof Error ? err.message : String(err)}`);
  }
}
