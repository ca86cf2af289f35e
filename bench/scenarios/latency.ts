import type { BenchArgs } from '../adapter.js';
import { LatencyHistogram } from '../latency-histogram.js';
import { nowMs, Pacer, sleep } from '../pace.js';
import { makeArgs, round, type Scenario } from '../scenario.js';

// Pickup latency at a fixed offered rate: single-job enqueues (one statement each, as an application
// would issue them) while workers run; each handler records now − the timestamp its args carry. The first
// second is warm-up and not recorded. The enqueue's own round trip (call → commit acknowledged) is recorded
// beside it: it is part of every job's latency, so the row shows how much of it is the producer's commit
// and how much the pickup after it.

const MAX_IN_FLIGHT = 64;
/** Exported for the command line, which refuses a --duration that would leave nothing measured. */
export const WARMUP_MS = 1000;

export const latencyScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile'],
  async run({ adapter, opts, progress }) {
    const hist = new LatencyHistogram();
    const enqueueHist = new LatencyHistogram();
    let handled = 0;
    let recordFrom = Infinity;
    await adapter.startWorkers(opts.concurrency, (args: BenchArgs) => {
      handled++;
      if (args.t >= recordFrom) hist.recordMs(nowMs() - args.t);
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
        const sentAt = nowMs();
        adapter
          .enqueueOne(make(i++))
          .then(() => {
            if (sentAt >= recordFrom) enqueueHist.recordMs(nowMs() - sentAt);
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
        samples: hist.count,
        enqueueErrors: errors,
        unhandled: pacer.issued - handled,
      },
    };
  },
};
