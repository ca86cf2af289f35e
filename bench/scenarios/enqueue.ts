import { makeArgs, round, type Scenario } from '../scenario.js';

// Bulk enqueue throughput: N jobs through each system's fastest documented bulk path, timed end to end
// (committed). No workers run.

export const enqueueScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile'],
  async run({ adapter, opts, progress }) {
    const bar = progress(`enqueue ${adapter.label}`, opts.jobs);
    const t0 = performance.now();
    await adapter.enqueueBulk(opts.jobs, makeArgs(opts.payloadBytes), (n) => bar.update(n), opts.unique);
    const seconds = (performance.now() - t0) / 1000;
    bar.finish(opts.jobs);
    return { jobs: opts.jobs, seconds: round(seconds, 3), jobsPerSec: Math.round(opts.jobs / seconds) };
  },
};
