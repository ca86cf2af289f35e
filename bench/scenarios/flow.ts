import { AwaClient, WorkerHost, type JobKind } from '../../src/index.js';
import { awaBenchKind } from '../adapters/awa.js';
import { sleep } from '../pace.js';
import { round, type Scenario } from '../scenario.js';

// Flows (awa only): the cost of a dependency edge. One run does the same work twice on the same database, each
// timed from its enqueue until its last job has completed: N plain jobs (enqueueMany), then a flow of N children
// and one fan-in job that depends on all of them (enqueueFlow: N edges). Both drain on the scenario's own host.
// The difference over N is what an edge costs end to end: written with the flow, resolved by the settling of its
// child, and the fan-in decided once (the flow also runs one more job, the fan-in, released by promotion).

/** How many jobs one enqueue call carries. */
const CHUNK = 10_000;

export function flowScenario(): Scenario {
  return {
    kind: 'system',
    systemsForAll: ['awa'],
    async run({ adapter, opts, progress, url }) {
      if (adapter.label !== 'awa') throw new Error(`flow runs awa only, not ${adapter.label}`);
      const kind = awaBenchKind as JobKind<unknown>;
      const client = new AwaClient({ connectionString: url, schema: adapter.schema, poolSize: 4 });
      let handled = 0;
      const host = new WorkerHost({
        connectionString: url,
        schema: adapter.schema,
        queues: { [awaBenchKind.queue]: { concurrency: opts.concurrency } },
        promoteIntervalMs: 50,
      });
      host.register(awaBenchKind, () => {
        handled++;
      });
      host.on('error', (err) =>
        process.stderr.write(`[awa] ${err instanceof Error ? err.message : String(err)}\n`),
      );
      const n = opts.jobs;
      try {
        await host.start();
        const plain = await timed(
          progress(`plain ${n}`, n),
          () => handled,
          n,
          async () => {
            for (let i = 0; i < n; i += CHUNK) {
              const size = Math.min(CHUNK, n - i);
              await client.enqueueMany(
                Array.from({ length: size }, (_, k) => ({ kind, args: { i: i + k } })),
              );
            }
          },
        );
        handled = 0;
        // One flow: its edges are written in the statement that writes its jobs.
        const children = Array.from({ length: n }, (_, i) => ({ name: `c${i}`, kind, args: { i } }));
        const flow = await timed(
          progress(`flow ${n}+1`, n + 1),
          () => handled,
          n + 1,
          async () => {
            await client.enqueueFlow({
              name: 'bench',
              jobs: [
                ...children,
                { name: 'join', kind, args: { join: true }, dependsOn: children.map((c) => c.name) },
              ],
            });
          },
        );
        const overheadUs = ((flow.seconds - plain.seconds) / n) * 1e6;
        return {
          jobs: n + 1,
          seconds: round(flow.seconds, 3),
          jobsPerSec: Math.round((n + 1) / flow.seconds),
          extra: {
            edges: n,
            plainJobsPerSec: Math.round(n / plain.seconds),
            plainEnqueueMs: Math.round(plain.enqueueMs),
            flowEnqueueMs: Math.round(flow.enqueueMs),
            edgeOverheadUs: round(overheadUs, 1),
          },
        };
      } finally {
        await host.stop();
        await client.close();
      }
    },
  };
}

/** Runs `enqueue`, then waits until `done()` reaches `total`: how long each part took. */
async function timed(
  bar: { update(n: number): void; finish(n: number): void },
  done: () => number,
  total: number,
  enqueue: () => Promise<void>,
): Promise<{ seconds: number; enqueueMs: number }> {
  const t0 = performance.now();
  await enqueue();
  const enqueueMs = performance.now() - t0;
  while (done() < total) {
    bar.update(done());
    await sleep(5);
  }
  bar.finish(total);
  return { seconds: (performance.now() - t0) / 1000, enqueueMs };
}
