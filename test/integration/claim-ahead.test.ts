import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type AwaClient, defineJob, type Settlement, WorkerHost } from '../../src/index.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// Claiming ahead against a real database: a host of one permit running fast jobs claims two at a time and
// holds the second. When its running handler stalls, the held job must not be stuck behind it: it goes back
// to the queue unstarted (no attempt spent) and another host runs it while the stall lasts. A held job that
// an operator cancels is dropped unstarted. Every other job runs exactly once.

const JOBS = 300;
const STALLER = 200;

let db: TestDatabase;
let client: AwaClient;
const running: WorkerHost[] = [];

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('claim_ahead'));
});
afterEach(async () => {
  await stopHosts(running);
});
afterAll(async () => {
  await stopHosts(running);
  await closeDatabase(client, db);
});

/** A queue of JOBS jobs (args n = 1…JOBS) whose job STALLER blocks on host A until `unstall()`; what ran where. */
async function stallingQueue(queue: string) {
  const kind = defineJob<{ n: number }>({ kind: `${queue}_k`, queue });
  const ids = (
    await client.enqueueMany(Array.from({ length: JOBS }, (_, i) => ({ kind, args: { n: i + 1 } })))
  ).map((r) => r.id);
  const ran: { n: number; host: string; attempt: number }[] = [];
  let unstall!: () => void;
  const stall = new Promise<void>((r) => (unstall = r));
  const settledOnA: Settlement[] = [];
  const a = new WorkerHost({
    connectionString: db.url,
    queues: { [queue]: { concurrency: 1 } },
    ...QUICK_HOST,
  });
  a.register(kind, async (j) => {
    ran.push({ n: j.args.n, host: 'A', attempt: j.attempt });
    if (j.args.n === STALLER) await stall;
  });
  a.on('settled', (s) => settledOnA.push(s));
  running.push(a);
  await a.start();
  // A runs the jobs before the staller one at a time, fast, so it claims ahead; the staller blocks its one
  // permit, and the job after it is claimed (running in the database) but not started.
  const next = ids[STALLER]!;
  await until('the staller to start', async () => ran.some((r) => r.n === STALLER), 15_000, 5);
  await until(
    'the job after it to be claimed',
    async () => (await client.getJob(next))?.state === 'running',
    15_000,
    5,
  );
  expect(ran.filter((r) => r.n > STALLER)).toEqual([]);
  return { kind, ids, ran, unstall, a, settledOnA, next };
}

describe('claiming ahead', () => {
  it('a held job whose host stalls goes back unstarted after 250 ms and runs on another host, attempt 1, while the stall lasts', async () => {
    const q = stallingQueue('q_ahead_stall');
    const { kind, ids, ran, unstall, settledOnA, next } = await q;
    const b = new WorkerHost({ connectionString: db.url, queues: { q_ahead_stall: 4 }, ...QUICK_HOST });
    b.register(kind, (j) => void ran.push({ n: j.args.n, host: 'B', attempt: j.attempt }));
    running.push(b);
    await b.start();
    await until('the held job to run on B', async () => ran.some((r) => r.n === STALLER + 1), 15_000, 5);
    // A handed it back (a snooze the database accepted) and never started it; the staller still runs.
    expect(settledOnA.filter((s) => s.jobId === next).map((s) => s.outcome)).toEqual(['snooze']);
    expect(ran.filter((r) => r.n === STALLER + 1)).toEqual([{ n: STALLER + 1, host: 'B', attempt: 1 }]);
    expect(settledOnA.some((s) => s.jobId === ids[STALLER - 1])).toBe(false);
    unstall();
    await until('every job completed', async () => {
      const c = (await client.counts()).find((x) => x.queue === 'q_ahead_stall');
      return c?.completed === JOBS;
    });
    // Each job ran exactly once, at attempt 1.
    expect(ran.map((r) => r.n).sort((x, y) => x - y)).toEqual(Array.from({ length: JOBS }, (_, i) => i + 1));
    expect(ran.every((r) => r.attempt === 1)).toBe(true);
    expect((await client.getJob(next))?.attempt).toBe(1);
    expect(ran.find((r) => r.n === STALLER)?.host).toBe('A');
  });

  it('a held job cancelled by an operator is dropped unstarted, and no result of it is ever sent', async () => {
    const { ids, ran, unstall, a, settledOnA, next } = await stallingQueue('q_ahead_cancel');
    expect(await client.cancel(next)).toBe('running');
    // Past the 250 ms a held job may wait: had the host still held it, it would have handed it back by now.
    await new Promise((r) => setTimeout(r, 400));
    unstall();
    await until('every other job completed', async () => {
      const c = (await client.counts()).find((x) => x.queue === 'q_ahead_cancel');
      return c?.completed === JOBS - 1 && c.cancelled === 1;
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(ran.map((r) => r.n).sort((x, y) => x - y)).toEqual(
      Array.from({ length: JOBS }, (_, i) => i + 1).filter((n) => n !== STALLER + 1),
    );
    expect(settledOnA.filter((s) => s.jobId === next)).toEqual([]);
    expect(settledOnA.filter((s) => s.jobId === ids[STALLER - 1]).map((s) => s.outcome)).toEqual([
      'completed',
    ]);
    expect((await client.getJob(next))?.state).toBe('cancelled');
    // A claimed every job (the cancelled one too), completed all but that one and counts it stale. A job it
    // held behind the staller after the cancel, it handed back after 250 ms (a snooze) and claimed again.
    expect(a.stats).toMatchObject({ claimed: JOBS + a.stats.snoozed, completed: JOBS - 1, stale: 1 });
    expect(a.stats.snoozed).toBeLessThanOrEqual(1);
  });
});
