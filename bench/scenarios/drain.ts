import type { WorkerFleet } from '../adapter.js';
import { makeArgs, round, type Scenario } from '../scenario.js';
import { sleep } from '../pace.js';
import { ServerCpu } from '../server-cpu.js';

// Drain: N no-op jobs are loaded first (untimed), then workers start (with --handler-us, each handler call
// keeps the thread busy that long, as a handler with CPU work of its own would; with --results, each returns a
// small object, which awa stores as the job's result) and the clock runs until the
// database says every job is settled, so a system that runs handlers fast but acknowledges slowly is
// not flattered. With --processes P (awa) the workers are P child processes of concurrency C/P each,
// spawned and loaded before the clock starts; as in-process, the clock includes the worker hosts' start.
// `extra.steadyJobsPerSec` is the rate between 10 % and 90 % done: without the hosts' start and the tail,
// which weigh more in a short run and for several processes starting at once. Where the system counts
// them (awa), `extra` also has the workers' Node CPU per job (the worker processes', or the whole harness
// process's in-process) and the jobs per claim call and per settle flush; for every system, when
// PostgreSQL runs on this machine, `extra.pgCpuUsPerJob` is the server's CPU per job over the drain.

/** Keeps the thread busy for `ms`: a handler doing CPU work of its own (--handler-us). */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

export const drainScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'pgboss-batch', 'graphile'],
  async run({ adapter, opts, progress, url }) {
    let fleet: WorkerFleet | null = null;
    let perProcess = opts.concurrency;
    if (opts.processes > 0) {
      if (!adapter.spawnWorkerProcesses) throw new Error(`${adapter.label} does not support --processes`);
      perProcess = Math.max(1, Math.floor(opts.concurrency / opts.processes));
    }

    const load = progress(`load ${adapter.label}`, opts.jobs);
    await adapter.enqueueBulk(opts.jobs, makeArgs(opts.payloadBytes), (n) => load.update(n));
    load.finish(opts.jobs);
    if (opts.processes > 0) fleet = await adapter.spawnWorkerProcesses!(opts.processes, perProcess);

    const serverCpu = await ServerCpu.open(url);
    const serverMsBefore = await serverCpu?.totalMs();
    let handled = 0;
    const done = fleet ? fleet.completed : () => handled;
    const bar = progress(`drain ${adapter.label}`, opts.jobs);
    const t0 = performance.now();
    if (fleet) fleet.start();
    else {
      const spend = opts.handlerUs / 1000;
      await adapter.startWorkers(opts.concurrency, () => {
        handled++;
        if (spend > 0) busy(spend);
        // --results: a small result per job, what a handler that reports its outcome returns.
        return opts.results ? { ok: true, n: handled } : undefined;
      });
    }
    // Progress is counted in memory (handler calls here, or the processes' reports of committed
    // completions); the database is asked only once they are all in, so the polling itself does not
    // compete with the drain.
    let t10 = 0;
    let t90 = 0;
    while (done() < opts.jobs) {
      const n = done();
      bar.update(n);
      if (!t10 && n >= opts.jobs * 0.1) t10 = performance.now();
      if (!t90 && n >= opts.jobs * 0.9) t90 = performance.now();
      await sleep(20);
    }
    while ((await adapter.pending()) > 0) await sleep(10);
    const seconds = (performance.now() - t0) / 1000;
    const serverMs = serverCpu ? (await serverCpu.totalMs()) - serverMsBefore! : null;
    bar.finish(done());
    const steady =
      t10 && t90 > t10 ? { steadyJobsPerSec: Math.round((opts.jobs * 0.8) / ((t90 - t10) / 1000)) } : {};
    const usage = fleet ? fleet.usage() : adapter.workerUsage?.();
    const cost = usage
      ? {
          nodeCpuUsPerJob: round(usage.cpuUs / opts.jobs, 1),
          jobsPerClaim: round(opts.jobs / Math.max(1, usage.claimCalls), 1),
          jobsPerFlush: round(opts.jobs / Math.max(1, usage.flushes), 1),
        }
      : {};
    const server = serverMs === null ? {} : { pgCpuUsPerJob: round((serverMs * 1000) / opts.jobs, 1) };
    return {
      jobs: opts.jobs,
      seconds: round(seconds, 3),
      jobsPerSec: Math.round(opts.jobs / seconds),
      extra: {
        ...(fleet
          ? { processes: opts.processes, concurrencyPerProcess: perProcess }
          : {
              handlerCalls: handled,
              ...(opts.handlerUs > 0 ? { handlerUs: opts.handlerUs } : {}),
              ...(opts.results ? { results: true } : {}),
            }),
        ...steady,
        ...cost,
        ...server,
      },
    };
  },
};
