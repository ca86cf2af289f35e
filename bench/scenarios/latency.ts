import type { BenchArgs } from '../adapter.js';
import { LatencyHistogram } from '../latency-histogram.js';
import { nowMs, Pacer, sleep } from '../pace.js';
import { makeArgs, round, type Scenario } from '../scenario.js';

// Pickup latency at a fixed offered rate: single-job enqueues (one statement each, as an application
// would issue them) while workers run; each handler records now − the timestamp its args carry. The first
// second is warm-up and not recorded. The enqueue's own round trip (call → commit acknowledged) is recorded
// beside it: it is part of every job's latency, so the row shows how much of it is the producer's commit
// and how much the pickup after it. The pickup after it is recorded too, per job: handler start − the
// moment the producer heard its commit, 0 for a job that started before its producer heard (the
// notification can overtake the commit's answer).

const MAX_IN_FLIGHT = 64;
/** Exported for the command line, which refuses a --duration that would leave nothing measured. */
export const WARMUP_MS = 1000;

export const latencyScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile'],
  async run({ adapter, opts, progress }) {
    const hist = new LatencyHistogram();
    const enqueueHist = new LatencyHistogram();
    const afterCommit = new AfterCommit();
    let handled = 0;
    let recordFrom = Infinity;
    await adapter.startWorkers(opts.concurrency, (args: BenchArgs) => {
      handled++;
      if (args.t < recordFrom) return;
      const now = nowMs();
      hist.recordMs(now - args.t);
      afterCommit.started(args.i, now);
    });
    const make = makeArgs(opts.payloadBytes);
    const bar = progress(`latency ${adapter.label}`, opts.duration);
    const start = performance.now();
    recordFrom = nowMs() + WARMUP_MS;
    const pacer = new Pacer(opts.rate, start);
    let inFlight = 0;
    let errors = 0;
    let i = 0;
    while (performance.now() - start < opts.duration * 1000) {
      let owed = pacer.owed();
      while (owed-- > 0 && inFlight < MAX_IN_FLIGHT) {
        inFlight++;
        pacer.sent(1);
        const sentArgs = make(i++);
        const sentAt = sentArgs.t;
        adapter
          .enqueueOne(sentArgs)
          .then(() => {
            if (sentAt < recordFrom) return;
            const now = nowMs();
            enqueueHist.recordMs(now - sentAt);
            afterCommit.committed(sentArgs.i, now);
          })
          .catch(() => errors++)
          .finally(() => inFlight--);
      }
      bar.update(Math.floor((performance.now() - start) / 1000));
      await sleep(2);
    }
    const seconds = (performance.now() - start) / 1000;
    while (inFlight > 0) await sleep(5);
    const deadline = performance.now() + 30_000;
    while (handled < pacer.issued && performance.now() < deadline) await sleep(10);
    bar.finish(opts.duration);
    return {
      jobs: pacer.issued,
      seconds: round(seconds, 3),
      jobsPerSec: Math.round(handled / seconds),
      ...hist.summaryMs(),
      extra: {
        offeredRate: opts.rate,
        enqueueMs: enqueueHist.summaryMs(),
        afterCommitMs: afterCommit.hist.summaryMs(),
        startedBeforeCommitHeard: afterCommit.early,
        samples: hist.count,
        enqueueErrors: errors,
        unhandled: pacer.issued - handled,
      },
    };
  },
};

/** Pickup after the commit: pairs each job's handler start with the moment its producer heard the commit,
 * in whichever order the two arrive. */
class AfterCommit {
  readonly hist = new LatencyHistogram();
  /** Jobs whose handler started before their producer heard the commit. */
  early = 0;
  private readonly heard = new Map<number, number>();
  private readonly startedFirst = new Set<number>();

  committed(i: number, at: number): void {
    if (this.startedFirst.delete(i)) {
      this.early++;
      this.hist.recordMs(0);
    } else this.heard.set(i, at);
  }

  started(i: number, at: number): void {
    const heardAt = this.heard.get(i);
    if (heardAt === undefined) this.startedFirst.add(i);
    else {
      this.heard.delete(i);
      this.hist.recordMs(at - heardAt);
    }
  }
}
