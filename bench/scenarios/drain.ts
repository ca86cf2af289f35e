import { makeArgs, round, type Scenario } from '../scenario.js';
import { sleep } from '../pace.js';

// Drain: N no-op jobs are loaded first (untimed), then workers start and the clock runs until the
// database says every job is settled, so a system that runs handlers fast but acknowledges slowly is
// not flattered.

export const drainScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'pgboss-batch', 'graphile'],
  async run({ adapter, opts, progress }) {
    const load = progress(`load ${adapter.label}`, opts.jobs);
    await adapter.enqueueBulk(opts.jobs, makeArgs(opts.payloadBytes), (n) => load.update(n));
    load.finish(opts.jobs);

    let handled = 0;
    const bar = progress(`drain ${adapter.label}`, opts.jobs);
    const t0 = performance.now();
    await adapter.startWorkers(opts.concurrency, () => {
      handled++;
    });
    // Handler calls are counted in memory; the database is asked only once they are all in, so the
    // polling itself does not compete with the drain.
    while (handled < opts.jobs) {
      bar.update(handled);
      await sleep(20);
    }
    while ((await adapter.pending()) > 0) await sleep(10);
    const seconds = (performance.now() - t0) / 1000;
    bar.finish(handled);
    return {
      jobs: opts.jobs,
      seconds: round(seconds, 3),
      jobsPerSec: Math.round(opts.jobs / seconds),
      extra: { handlerCalls: handled },
    };
  },
};
