import { WorkerHost } from '../../src/index.js';
import { awaBenchKind } from '../adapters/awa.js';
import { sleep } from '../pace.js';
import { makeArgs, round, type Scenario } from '../scenario.js';

// Durable steps (awa only): N jobs are loaded first (untimed), then a host whose handler runs `steps` durable
// steps per job (ctx.step, each a tiny value) drains them; the clock runs until the database says every job is
// settled, as in drain. `steps-1` against `steps-3` gives the cost of a step beyond a job's first (the first
// also reads the job's recorded steps, once per attempt); against drain, the cost of using steps at all. The
// host is the scenario's own (the adapter's handlers get no context); it runs the adapter's kind and queue.

export function stepsScenario(steps: number): Scenario {
  return {
    kind: 'system',
    systemsForAll: ['awa'],
    async run({ adapter, opts, progress, url }) {
      if (adapter.label !== 'awa') throw new Error(`steps-${steps} runs awa only, not ${adapter.label}`);
      const load = progress(`load ${adapter.label}`, opts.jobs);
      await adapter.enqueueBulk(opts.jobs, makeArgs(opts.payloadBytes), (n) => load.update(n));
      load.finish(opts.jobs);

      let handled = 0;
      const host = new WorkerHost({
        connectionString: url,
        schema: adapter.schema,
        queues: { [awaBenchKind.queue]: { concurrency: opts.concurrency } },
      });
      host.register(awaBenchKind, async (_job, ctx) => {
        for (let s = 0; s < steps; s++) await ctx.step(`s${s}`, () => s);
        handled++;
      });
      host.on('error', (err) =>
        process.stderr.write(`[awa] ${err instanceof Error ? err.message : String(err)}\n`),
      );
      const bar = progress(`steps-${steps} ${adapter.label}`, opts.jobs);
      const t0 = performance.now();
      try {
        await host.start();
        while (handled < opts.jobs) {
          bar.update(handled);
          await sleep(20);
        }
        while ((await adapter.pending()) > 0) await sleep(10);
      } finally {
        await host.stop();
      }
      const seconds = (performance.now() - t0) / 1000;
      bar.finish(handled);
      return {
        jobs: opts.jobs,
        seconds: round(seconds, 3),
        jobsPerSec: Math.round(opts.jobs / seconds),
        extra: { stepsPerJob: steps, stepsPerSec: Math.round((opts.jobs * steps) / seconds) },
      };
    },
  };
}
