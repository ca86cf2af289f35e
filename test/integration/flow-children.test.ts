import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import { defineJob, WaitForChildren, WorkerHost, type DependencyOutcome } from '../../src/index.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// A running job's children (docs/flows.md, "Children"): ctx.spawn() enqueues them once per job, and
// ctx.waitForChildren() parks the parent without its permit until they have all ended, then runs it again with
// how each ended. One permit for the queue proves the parent let go of its own: its children could not run
// otherwise. A parent that fails after spawning is retried and spawns nothing new.

let db: TestDatabase;
let client: AwaClient;
const hosts: WorkerHost[] = [];

const parent = defineJob<{ children: number; failOnce?: boolean }>({ kind: 'parent', queue: 'family' });
const child = defineJob<{ n: number; fail?: boolean }>({ kind: 'child', queue: 'family', maxAttempts: 1 });

let parentRuns: number;
let spawnedIds: string[][];
let heard: DependencyOutcome[][];

async function startHost(): Promise<void> {
  const host = new WorkerHost({ connectionString: db.url, queues: { family: 1 }, ...QUICK_HOST });
  host.on('error', () => {});
  host.register(parent, async (job, ctx) => {
    parentRuns++;
    const ids = await ctx.spawn(
      'fan',
      Array.from({ length: job.args.children }, (_, n) => ({
        name: `c${n}`,
        kind: child,
        args: { n, fail: n === 1 },
      })),
    );
    spawnedIds.push(ids);
    if (job.args.failOnce && job.attempt === 1) throw new Error('the parent fails once after spawning');
    const ended = await ctx.waitForChildren();
    heard.push(ended);
    return ended.filter((c) => c.outcome === 'completed').reduce((sum, c) => sum + (c.result as number), 0);
  });
  host.register(child, (job) => {
    if (job.args.fail) throw new Error(`child ${job.args.n} fails`);
    return job.args.n;
  });
  hosts.push(host);
  await host.start();
}

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('flow_children', { poolSize: 4 }));
});
afterEach(async () => {
  await stopHosts(hosts);
});
afterAll(async () => {
  await closeDatabase(client, db);
});

describe('ctx.spawn() and ctx.waitForChildren()', () => {
  it('the parent lets go of its permit while its children run, and runs again with how each ended', async () => {
    parentRuns = 0;
    spawnedIds = [];
    heard = [];
    await startHost();
    const { id } = await client.enqueue(parent, { children: 20 });
    await until('the parent completed', async () => (await client.getJob(id))?.state === 'completed', 30_000);
    // Spawned once; the second run replayed the same ids.
    expect(spawnedIds).toHaveLength(2);
    expect(spawnedIds[1]).toEqual(spawnedIds[0]);
    expect(parentRuns).toBe(2);
    const ended = heard[0]!;
    expect(ended).toHaveLength(20);
    expect(ended.filter((c) => c.outcome === 'completed')).toHaveLength(19);
    expect(ended.find((c) => c.name?.endsWith('/c1'))).toMatchObject({ outcome: 'failed', spawned: true });
    const sum = Array.from({ length: 20 }, (_, n) => n).reduce((a, b) => a + b, 0) - 1;
    expect(await client.getJob(id)).toMatchObject({ state: 'completed', attempt: 1, result: sum });
    // The parent and its children are one flow.
    const { rows } = await client.pool.query<{ flow_id: string }>(
      'select flow_id::text from awa.flow_jobs where job_id = $1',
      [id],
    );
    const flow = (await client.getFlow(rows[0]!.flow_id))!;
    expect(flow.jobs).toHaveLength(21);
    expect(flow.counts).toEqual({ completed: 20, failed: 1 });
  });

  it('a parent that fails after spawning is retried and spawns nothing new', async () => {
    parentRuns = 0;
    spawnedIds = [];
    heard = [];
    await startHost();
    const { id } = await client.enqueue(parent, { children: 5, failOnce: true });
    await until('the parent completed', async () => (await client.getJob(id))?.state === 'completed', 60_000);
    expect(new Set(spawnedIds.map((ids) => ids.join(','))).size).toBe(1);
    const { rows } = await client.pool.query<{ n: string }>(
      'select count(*) as n from awa.job_dependencies where job_id = $1 and spawned',
      [id],
    );
    expect(rows[0]!.n).toBe('5');
    expect((await client.getJob(id))!.result).toBe(0 + 2 + 3 + 4);
  });

  it('waitForChildren() with nothing spawned returns at once', async () => {
    const lonely = defineJob({ kind: 'lonely', queue: 'family' });
    const host = new WorkerHost({ connectionString: db.url, queues: { family: 1 }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(lonely, async (_job, ctx) => (await ctx.waitForChildren()).length);
    hosts.push(host);
    await host.start();
    const { id } = await client.enqueue(lonely, {});
    await until('completed', async () => (await client.getJob(id))?.state === 'completed');
    expect((await client.getJob(id))!.result).toBe(0);
    expect(new WaitForChildren(2).message).toBe('waiting for 2 child job(s) to end');
  });
});
