import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import {
  defineJob,
  WorkerHost,
  type FlowInput,
  type OnDependencyFailure,
  type JobKind,
} from '../../src/index.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// Random flows checked against their history (docs/correctness.md, "Flows"): fast-check draws a graph (each job
// depends on some earlier ones, each edge with a random policy) and which jobs' handlers fail, and two hosts run
// it. From the ledger of handler starts and ends and the flow's final read:
//   - nothing stays blocked: every job of the flow ends;
//   - no job runs twice, and none runs before every job it depends on has ended;
//   - each job ends as the reference decision says: run when every dependency completed (or its edge says run
//     anyway), else failed (an edge says fail) or skipped, as cancelled (an edge says skip).

let db: TestDatabase;
let client: AwaClient;
const hosts: WorkerHost[] = [];
let tick = 0;
const ledger = new Map<string, { started: number; ended: number; runs: number }>();

const node = defineJob<{ fail: boolean }>({ kind: 'history_node', queue: 'flow_histories', maxAttempts: 1 });

interface Graph {
  deps: { on: number; policy: OnDependencyFailure }[][];
  failing: boolean[];
}

const graphs: fc.Arbitrary<Graph> = fc.integer({ min: 1, max: 12 }).chain((n) =>
  fc.record({
    deps: fc.tuple(
      ...Array.from({ length: n }, (_, i) =>
        fc.uniqueArray(
          fc.record({
            on: fc.integer({ min: 0, max: Math.max(0, i - 1) }),
            policy: fc.constantFrom<OnDependencyFailure>('fail', 'skip', 'run'),
          }),
          { maxLength: i === 0 ? 0 : Math.min(i, 3), selector: (d) => d.on },
        ),
      ),
    ),
    failing: fc.array(fc.boolean(), { minLength: n, maxLength: n }),
  }),
);

/** What the reference decides for each job, in order (dependencies always come earlier). */
function expected(g: Graph): string[] {
  const end: string[] = [];
  g.deps.forEach((deps, i) => {
    const broken = deps.filter((d) => end[d.on] !== 'completed');
    if (broken.some((d) => d.policy === 'fail')) end[i] = 'failed';
    else if (broken.some((d) => d.policy === 'skip')) end[i] = 'cancelled';
    else end[i] = g.failing[i] ? 'failed' : 'completed';
  });
  return end;
}

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('flow_histories', { poolSize: 4 }));
  for (let h = 0; h < 2; h++) {
    const host = new WorkerHost({ connectionString: db.url, queues: { flow_histories: 4 }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(node, async (job) => {
      const seen = ledger.get(job.id) ?? { started: 0, ended: 0, runs: 0 };
      seen.runs++;
      seen.started = ++tick;
      ledger.set(job.id, seen);
      await new Promise((r) => setTimeout(r, 1 + (Number(job.id) % 7)));
      seen.ended = ++tick;
      if (job.args.fail) throw new Error('fails by design');
    });
    hosts.push(host);
    await host.start();
  }
});
afterAll(async () => {
  await stopHosts(hosts);
  await closeDatabase(client, db);
});

describe('flow histories', () => {
  it('every random flow ends as the reference decides, each job at most once and never early', async () => {
    await fc.assert(
      fc.asyncProperty(graphs, async (g) => {
        const flow: FlowInput = {
          jobs: g.deps.map((deps, i) => ({
            name: `n${i}`,
            kind: node as JobKind<unknown>,
            args: { fail: g.failing[i]! },
            dependsOn: deps.map((d) => ({ name: `n${d.on}`, onFailure: d.policy })),
          })),
        };
        const { flowId, jobs } = await client.enqueueFlow(flow);
        const done = await until(
          `flow ${flowId} to end`,
          async () => {
            const f = await client.getFlow(flowId);
            return f && f.state !== 'running' ? f : undefined;
          },
          30_000,
          25,
        );
        const want = expected(g);
        const got = g.deps.map((_, i) => done.jobs.find((j) => j.name === `n${i}`)!.state);
        expect(got).toEqual(want);
        g.deps.forEach((deps, i) => {
          const run = ledger.get(jobs[`n${i}`]!);
          // It ran exactly when the reference let it run, once.
          const ran = want[i] !== 'cancelled' && !blockedByFail(g, want, i);
          expect(run?.runs ?? 0).toBe(ran ? 1 : 0);
          if (!run) return;
          for (const d of deps) {
            const before = ledger.get(jobs[`n${d.on}`]!);
            // A dependency that ran had ended before this one started; one that never ran was decided first.
            if (before) expect(run.started).toBeGreaterThan(before.ended);
          }
        });
      }),
      { numRuns: 25 },
    );
  }, 300_000);
});

/** Whether job i was failed by a dependency (it then never ran) rather than by its own handler. */
function blockedByFail(g: Graph, want: readonly string[], i: number): boolean {
  return g.deps[i]!.some((d) => want[d.on] !== 'completed' && d.policy === 'fail');
}
