import type { BenchArgs, SystemAdapter } from '../adapter.js';
import { makeArgs, round, type Scenario } from '../scenario.js';
import { ServerCpu } from '../server-cpu.js';

// Enqueue throughput: N jobs through each system's fastest documented bulk path, timed end to end
// (committed). No workers run. With --single, the same N jobs one per statement (what an application does
// per request), --producers calls in flight at once, each taking the next job when its call returns; `extra`
// then has what a job cost in CPU: this Node process's (the producer's side) and, when PostgreSQL runs on this
// machine, the server's (every process of it: on a shared server, others' work too).

export const enqueueScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile'],
  async run({ adapter, url, opts, progress }) {
    const bar = progress(`enqueue ${adapter.label}`, opts.jobs);
    const make = makeArgs(opts.payloadBytes);
    if (!opts.single) {
      const t0 = performance.now();
      await adapter.enqueueBulk(opts.jobs, make, (n) => bar.update(n), opts.unique);
      const seconds = (performance.now() - t0) / 1000;
      bar.finish(opts.jobs);
      return { jobs: opts.jobs, seconds: round(seconds, 3), jobsPerSec: Math.round(opts.jobs / seconds) };
    }
    const serverCpu = await ServerCpu.open(url);
    const cpu0 = { server: await serverCpu?.totalMs(), node: process.cpuUsage() };
    const t0 = performance.now();
    await enqueueSingly(adapter, opts.jobs, opts.producers, make, (n) => bar.update(n));
    const seconds = (performance.now() - t0) / 1000;
    const node = process.cpuUsage(cpu0.node);
    const serverMs =
      serverCpu && cpu0.server !== undefined ? (await serverCpu.totalMs()) - cpu0.server : null;
    bar.finish(opts.jobs);
    return {
      jobs: opts.jobs,
      concurrency: opts.producers,
      seconds: round(seconds, 3),
      jobsPerSec: Math.round(opts.jobs / seconds),
      extra: {
        mode: 'single',
        producers: opts.producers,
        nodeCpuUsPerJob: round((node.user + node.system) / opts.jobs, 1),
        ...(serverMs === null ? {} : { pgCpuUsPerJob: round((serverMs * 1000) / opts.jobs, 1) }),
      },
    };
  },
};

async function enqueueSingly(
  adapter: SystemAdapter,
  jobs: number,
  producers: number,
  make: (i: number) => BenchArgs,
  onProgress: (done: number) => void,
): Promise<void> {
  let next = 0;
  let done = 0;
  const producer = async () => {
    while (next < jobs) {
      await adapter.enqueueOne(make(next++));
      if (++done % 500 === 0) onProgress(done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(producers, jobs) }, producer));
}
