import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import {
  defineJob,
  InvalidOptionError,
  WorkerHost,
  type FlowInput,
  type FlowRecord,
  type JobKind,
} from '../../src/index.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';
import { runCli } from '../../src/cli/main.js';
import { pruneFlows, resolveSchema } from '../../src/storage/operations.js';

// Flows against a real database and real hosts (docs/flows.md, "Dependencies"): a dependent runs only after
// every job it depends on ended, once; a 10,000-job fan-out joins into one fan-in job with exact counts, across
// two hosts settling side by side; each failure policy decides its dependent and the decision cascades; a
// cancelled flow runs nothing more; a rolled-back flow leaves nothing; bad graphs are refused before anything is
// written. A ledger records each handler's start and end (its order is what the assertions read).

let db: TestDatabase;
let client: AwaClient;
const hosts: WorkerHost[] = [];

/** Every handler run: which job, and the ledger position of its start and end. */
interface Run {
  name: string;
  id: string;
  started: number;
  ended: number;
}
let clock = 0;
const ledger: Run[] = [];

const step = defineJob<{ name: string; fail?: boolean; holdMs?: number }>({
  kind: 'flow_step',
  queue: 'flows',
  maxAttempts: 1,
});

async function startHosts(n: number, concurrency = 8): Promise<void> {
  for (let i = 0; i < n; i++) {
    const host = new WorkerHost({ connectionString: db.url, queues: { flows: concurrency }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(step, async (job) => {
      const run: Run = { name: job.args.name, id: job.id, started: ++clock, ended: 0 };
      ledger.push(run);
      if (job.args.holdMs) await new Promise((r) => setTimeout(r, job.args.holdMs));
      run.ended = ++clock;
      if (job.args.fail) throw new Error(`${job.args.name} fails`);
    });
    hosts.push(host);
    await host.start();
  }
}

const job = (name: string, dependsOn?: FlowInput['jobs'][number]['dependsOn'], extra: object = {}) => ({
  name,
  kind: step as JobKind<unknown>,
  args: { name, ...extra },
  ...(dependsOn ? { dependsOn } : {}),
});

async function settled(flowId: string, timeoutMs = 60_000): Promise<FlowRecord> {
  return until(
    `flow ${flowId} to end`,
    async () => {
      const flow = await client.getFlow(flowId);
      return flow && flow.state !== 'running' ? flow : undefined;
    },
    timeoutMs,
    50,
  );
}

const runOf = (name: string) => ledger.filter((r) => r.name === name);

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('flows', { poolSize: 4 }));
});
afterEach(async () => {
  await stopHosts(hosts);
  ledger.length = 0;
});
afterAll(async () => {
  await closeDatabase(client, db);
});

describe('dependencies', () => {
  it('a diamond runs each job once, every dependent after all it depends on ended', async () => {
    const { flowId, jobs } = await client.enqueueFlow({
      name: 'diamond',
      jobs: [job('d', ['b', 'c']), job('b', ['a'], { holdMs: 30 }), job('c', ['a']), job('a')],
    });
    // Nothing runs yet: the dependents are blocked, the root is available.
    const before = (await client.getFlow(flowId))!;
    expect(before).toMatchObject({ name: 'diamond', state: 'running', counts: { available: 1, blocked: 3 } });
    expect(await client.getJob(jobs.d!)).toMatchObject({ state: 'blocked' });
    await startHosts(1);
    const flow = await settled(flowId);
    expect(flow.state).toBe('completed');
    expect(flow.counts).toEqual({ completed: 4 });
    for (const name of ['a', 'b', 'c', 'd']) expect(runOf(name)).toHaveLength(1);
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((n) => runOf(n)[0]!);
    expect(b!.started).toBeGreaterThan(a!.ended);
    expect(c!.started).toBeGreaterThan(a!.ended);
    expect(d!.started).toBeGreaterThan(Math.max(b!.ended, c!.ended));
    const shown = flow.jobs.find((j) => j.name === 'd')!;
    expect(shown.dependsOn.map((e) => [e.name, e.onFailure, e.outcome])).toEqual([
      ['b', 'fail', 'completed'],
      ['c', 'fail', 'completed'],
    ]);
  });

  it('10,000 fan-out jobs join into one fan-in job, run once after all of them, across two hosts', async () => {
    const n = 10_000;
    const children = Array.from({ length: n }, (_, i) => job(`child-${i}`));
    const { flowId } = await client.enqueueFlow({
      name: 'fan',
      jobs: [
        ...children,
        job(
          'join',
          children.map((c) => c.name),
        ),
      ],
    });
    expect((await client.getFlow(flowId))!.counts).toEqual({ available: n, blocked: 1 });
    await startHosts(2, 32);
    const flow = await settled(flowId, 180_000);
    expect(flow.state).toBe('completed');
    expect(flow.counts).toEqual({ completed: n + 1 });
    expect(ledger.filter((r) => r.name.startsWith('child-'))).toHaveLength(n);
    expect(new Set(ledger.map((r) => r.name)).size).toBe(n + 1);
    const join = runOf('join');
    expect(join).toHaveLength(1);
    expect(join[0]!.started).toBeGreaterThan(
      Math.max(...ledger.filter((r) => r.name !== 'join').map((r) => r.ended)),
    );
  }, 240_000);

  it('each policy decides a dependent of a failed job, and the decision carries on down the graph', async () => {
    const { flowId, jobs } = await client.enqueueFlow({
      jobs: [
        job('root', undefined, { fail: true }),
        job('failing', ['root']),
        job('skipped', [{ name: 'root', onFailure: 'skip' }]),
        job('anyway', [{ name: 'root', onFailure: 'run' }]),
        job('after-failing', ['failing']),
        job('after-skipped-anyway', [{ name: 'skipped', onFailure: 'run' }]),
        job('after-anyway', ['anyway']),
      ],
    });
    await startHosts(1);
    const flow = await settled(flowId);
    expect(flow.state).toBe('failed');
    const state = Object.fromEntries(flow.jobs.map((j) => [j.name, j.state]));
    expect(state).toEqual({
      root: 'failed',
      failing: 'failed',
      skipped: 'cancelled',
      anyway: 'completed',
      'after-failing': 'failed',
      'after-skipped-anyway': 'completed',
      'after-anyway': 'completed',
    });
    // Only the root and those allowed to run ran, once each; nothing the policies stopped ran at all.
    expect(ledger.map((r) => r.name).sort()).toEqual([
      'after-anyway',
      'after-skipped-anyway',
      'anyway',
      'root',
    ]);
    const failing = await client.getJob(jobs.failing!);
    expect(failing!.meta!.errors!.at(-1)).toMatchObject({
      name: 'DependencyFailed',
      error: `dependency ${jobs.root} failed`,
    });
    const skipped = await client.getJob(jobs.skipped!);
    expect(skipped!.meta!.errors!.at(-1)!.error).toBe(`skipped: dependency ${jobs.root} failed`);
  });

  it('cancelFlow cancels what has not ended, blocked jobs included, and nothing of the flow runs after', async () => {
    const { flowId, jobs } = await client.enqueueFlow({
      jobs: [job('first'), job('second', ['first']), job('third', [{ name: 'second', onFailure: 'run' }])],
    });
    expect(await client.cancelFlow(flowId)).toBe(3);
    const flow = (await client.getFlow(flowId))!;
    expect(flow).toMatchObject({ state: 'cancelled', counts: { cancelled: 3 } });
    await startHosts(1);
    // A job enqueued after the cancel runs, so the host has had its chance at the flow's.
    const probe = await client.enqueue(step, { name: 'probe' });
    await until('the probe ran', async () => (await client.getJob(probe.id))?.state === 'completed');
    expect(ledger.map((r) => r.name)).toEqual(['probe']);
    expect(await client.getJob(jobs.third!)).toMatchObject({ state: 'cancelled' });
    expect(await client.cancelFlow(flowId)).toBe(0);
    expect(await client.cancelFlow('999999999')).toBeNull();
  });

  it('depends on jobs outside the flow by id: one that completed already, and one that completes later', async () => {
    const done = await client.enqueue(step, { name: 'outside-done' });
    await startHosts(1);
    await until(
      'the outside job completed',
      async () => (await client.getJob(done.id))?.state === 'completed',
    );
    await stopHosts(hosts);
    const later = await client.enqueue(step, { name: 'outside-later' });
    const { flowId } = await client.enqueueFlow({
      jobs: [job('after-done', [{ id: done.id }]), job('after-later', [{ id: later.id }])],
    });
    const before = (await client.getFlow(flowId))!;
    // The first was released as it was written (its dependency had ended); the second waits.
    expect(before.counts).toEqual({ scheduled: 1, blocked: 1 });
    await startHosts(1);
    const flow = await settled(flowId);
    expect(flow.counts).toEqual({ completed: 2 });
    const order = ledger.map((r) => r.name);
    expect(order.indexOf('after-later')).toBeGreaterThan(order.indexOf('outside-later'));
    expect(flow.jobs.find((j) => j.name === 'after-later')!.dependsOn).toEqual([
      { id: later.id, name: null, onFailure: 'fail', outcome: 'completed' },
    ]);
  });

  it('a dependent reads how each job it depends on ended and what it returned (ctx.dependencies())', async () => {
    const producer = defineJob<{ value: number }>({ kind: 'flow_value', queue: 'flows', maxAttempts: 1 });
    const consumer = defineJob({ kind: 'flow_sum', queue: 'flows' });
    const host = new WorkerHost({ connectionString: db.url, queues: { flows: 4 }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(producer, (job) => {
      if (job.args.value < 0) throw new Error('negative');
      return job.args.value;
    });
    let seen: unknown;
    host.register(consumer, async (_job, ctx) => {
      const deps = await ctx.dependencies();
      seen = deps.map(({ name, onFailure, outcome, result, spawned }) => ({
        name,
        onFailure,
        outcome,
        result,
        spawned,
      }));
      return deps.reduce((sum, d) => sum + ((d.result as number | null) ?? 0), 0);
    });
    hosts.push(host);
    await host.start();
    const { jobs } = await client.enqueueFlow({
      jobs: [
        { name: 'two', kind: producer, args: { value: 2 } },
        { name: 'five', kind: producer, args: { value: 5 } },
        { name: 'bad', kind: producer, args: { value: -1 } },
        {
          name: 'sum',
          kind: consumer,
          args: {},
          dependsOn: ['two', 'five', { name: 'bad', onFailure: 'run' }],
        },
      ],
    });
    await until('the sum completed', async () => (await client.getJob(jobs.sum!))?.state === 'completed');
    expect(seen).toEqual([
      { name: 'two', onFailure: 'fail', outcome: 'completed', result: 2, spawned: false },
      { name: 'five', onFailure: 'fail', outcome: 'completed', result: 5, spawned: false },
      { name: 'bad', onFailure: 'run', outcome: 'failed', result: null, spawned: false },
    ]);
    expect((await client.getJob(jobs.sum!))!.result).toBe(7);
  });

  it('a flow enqueued in a transaction that rolls back leaves nothing', async () => {
    const tx = await client.pool.connect();
    let flowId: string;
    try {
      await tx.query('begin');
      ({ flowId } = await client.enqueueFlow({ jobs: [job('x'), job('y', ['x'])] }, { client: tx }));
      await tx.query('rollback');
    } finally {
      tx.release();
    }
    expect(await client.getFlow(flowId)).toBeNull();
  });
});

describe('pruning', () => {
  it('the leader prunes a flow once none of its jobs is found, with its edges, and keeps one whose jobs are', async () => {
    // Its root scheduled, so neither job has a ring row (a ring row is found until its slot is pruned).
    const gone = await client.enqueueFlow({
      jobs: [{ ...job('p1'), options: { runAt: new Date(Date.now() + 3_600_000) } }, job('p2', ['p1'])],
    });
    const kept = await client.enqueueFlow({ jobs: [job('k1'), job('k2', ['k1'])] });
    await client.cancelFlow(gone.flowId);
    await client.cancelFlow(kept.flowId);
    // The first flow's history passes retention (what cleanup() deletes after failedRetentionMs).
    await client.pool.query('delete from awa.done_entries where job_id = any($1::bigint[])', [
      Object.values(gone.jobs),
    ]);
    const schema = resolveSchema();
    const pruned = await pruneFlows(client.pool, schema, '0', 100, 0);
    expect(pruned.deleted).toBe(1);
    expect(await client.getFlow(gone.flowId)).toBeNull();
    expect(await client.getFlow(kept.flowId)).toMatchObject({ counts: { cancelled: 2 } });
    const { rows } = await client.pool.query<{ n: string }>(
      'select count(*) as n from awa.job_dependencies where job_id = any($1::bigint[])',
      [[...Object.values(gone.jobs), ...Object.values(kept.jobs)]],
    );
    expect(rows[0]!.n).toBe('1');
    // Not before the flow is older than the minimum age.
    expect((await pruneFlows(client.pool, schema, '0', 100, 3600)).deleted).toBe(0);
  });
});

describe('awa flow', () => {
  async function awa(args: readonly string[]) {
    let stdout = '';
    let stderr = '';
    const code = await runCli(args, {
      env: { DATABASE_URL: db.url },
      stdout: { write: (t: string) => (stdout += t) },
      stderr: { write: (t: string) => (stderr += t) },
    });
    return { code, stdout, stderr };
  }

  it('lists, shows and cancels a flow', async () => {
    const { flowId, jobs } = await client.enqueueFlow({
      name: 'cli-flow',
      jobs: [job('fetch'), job('parse', ['fetch']), job('notify', [{ name: 'parse', onFailure: 'skip' }])],
    });
    const list = await awa(['flow', 'list', '--json']);
    expect(list.code).toBe(0);
    expect(JSON.parse(list.stdout)[0]).toMatchObject({ flowId, name: 'cli-flow', jobs: 3 });
    const shown = await awa(['flow', 'show', flowId]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain(`flow ${flowId} (cli-flow): running; 1 available, 2 blocked`);
    expect(shown.stdout).toMatch(new RegExp(`notify\\s+${jobs.notify}\\s+blocked\\s+parse\\[skip\\]`));
    const json = JSON.parse((await awa(['flow', 'show', flowId, '--json'])).stdout) as FlowRecord;
    expect(json.jobs.map((j) => j.name)).toEqual(['fetch', 'parse', 'notify']);
    const cancelled = await awa(['flow', 'cancel', flowId]);
    expect(cancelled).toMatchObject({ code: 0, stdout: `cancelled 3 job(s) of flow ${flowId}\n` });
    expect((await client.getFlow(flowId))!.counts).toEqual({ cancelled: 3 });
    const missing = await awa(['flow', 'show', '424242424242']);
    expect(missing).toMatchObject({ code: 1, stderr: 'flow 424242424242 not found\n' });
    expect((await awa(['flow', 'show', 'x1'])).code).toBe(2);
  });
});

describe('a flow is checked before anything is written', () => {
  const refused = async (flow: FlowInput, field: string, message: RegExp) => {
    const err = await client.enqueueFlow(flow).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidOptionError);
    expect(err).toMatchObject({ field });
    expect((err as Error).message).toMatch(message);
  };

  it('refuses cycles, unknown and duplicate names, self-dependencies, unique jobs and bad policies', async () => {
    await refused({ jobs: [job('a', ['b']), job('b', ['a'])] }, 'flow.jobs[0].dependsOn', /cycle/);
    await refused({ jobs: [job('a', ['nope'])] }, 'flow.jobs[0].dependsOn[0]', /"nope" is not the name/);
    await refused({ jobs: [job('a'), job('a')] }, 'flow.jobs[1].name', /names two jobs/);
    await refused({ jobs: [job('a', ['a'])] }, 'flow.jobs[0].dependsOn[0]', /itself/);
    await refused({ jobs: [job('a'), job('b', ['a', 'a'])] }, 'flow.jobs[1].dependsOn[1]', /twice/);
    await refused(
      { jobs: [{ ...job('a'), options: { unique: true } as object }] },
      'flow.jobs[0].options.unique',
      /cannot be unique/,
    );
    await refused(
      { jobs: [job('a'), job('b', [{ name: 'a', onFailure: 'maybe' as 'run' }])] },
      'flow.jobs[1].dependsOn[0].onFailure',
      /fail, skip, run/,
    );
    await refused({ jobs: [] }, 'flow.jobs', /1 to 100000/);
    await refused(
      { jobs: [job('a', [{ id: '987654321987' }])] },
      'flow.jobs[0].dependsOn',
      /job 987654321987 .* does not exist/,
    );
    const counts = await client.counts();
    expect(counts.reduce((n, q) => n + q.blocked, 0)).toBe(0);
  });
});
