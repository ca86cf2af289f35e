// What the operator surfaces cost where it hurts: every read behind the dashboard and `awa job|queue|dlq|storage`,
// timed on a database holding --history completed jobs, --backlog available jobs of a queue nothing serves,
// --running jobs held by their handlers, and a few scheduled, failed, dead-lettered and parked ones. The first
// history - --pinned jobs are drained and pruned into compact history. Then the backlog is loaded and its slot
// sealed: nothing claims it, so prune stops there and the ring holds everything after it (what a queue nobody
// serves does to a live system). A REPEATABLE READ snapshot is opened, and the last --pinned jobs complete a few
// at a time, so the held ring fills with small receipts; once its sixteen slots are used, the current slot takes
// the rest. A leader keeps running (rotate, prune, tally) and the snapshot stays open while the reads are timed.
//
//   npx tsx bench/operator-reads.ts [--history 10000000] [--pinned 1000000] [--backlog 1000000]
//                                   [--pinned-concurrency 4] [--running 200] [--calls 100] [--json] [--keep]
//
// Each read runs --calls times, one at a time on a warm pool; prints p50, p99 and the slowest. Then the running
// search six at once beside the queue list (what six open dashboards cost the page everyone looks at). Uses
// DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432) and creates and drops its own database.
import { AwaClient, FailJob, WaitForCallback, WorkerHost, defineJob } from '../src/index.js';
import { benchClient, createDatabase, dropDatabase } from './database.js';

const args = process.argv.slice(2);
const opt = (name: string, dflt: number) => {
  const i = args.indexOf(`--${name}`);
  const v = i >= 0 ? Number(args[i + 1]?.replace(/_/g, '')) : dflt;
  if (!Number.isInteger(v) || v < 0) throw new Error(`--${name} must be a whole number, got ${args[i + 1]}`);
  return v;
};
const history = opt('history', 10_000_000);
const pinned = Math.min(opt('pinned', 1_000_000), history);
const backlog = opt('backlog', 1_000_000);
const running = opt('running', 200);
// Hosts of this concurrency per queue run the pinned jobs: claims of a few jobs each, so the ring holds many
// receipts, as a live system's does (a bulk drain's claims of hundreds make few).
const pinnedConcurrency = opt('pinned-concurrency', 4);
const calls = opt('calls', 100);
const asJson = args.includes('--json');
// Keeps the database (and prints its URL) instead of dropping it: for EXPLAIN on what was measured.
const keep = args.includes('--keep');

const QUEUES = ['email', 'billing', 'reports', 'webhooks'];
const kinds = QUEUES.map((queue) => defineJob<{ n: number }>({ kind: `${queue}_job`, queue }));
const held = defineJob<{ n: number }>({ kind: 'held_job', queue: 'held' });
const failing = defineJob<{ n: number }>({ kind: 'failing_job', queue: 'failing', maxAttempts: 1 });
const doomed = defineJob<{ n: number }>({ kind: 'doomed_job', queue: 'doomed', maxAttempts: 1 });
const parked = defineJob<{ n: number }>({ kind: 'parked_job', queue: 'parked' });

interface Timing {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

function summary(ms: number[]): Timing {
  ms.sort((a, b) => a - b);
  const at = (q: number) => Math.round(ms[Math.min(ms.length - 1, Math.floor(ms.length * q))]! * 100) / 100;
  return { p50Ms: at(0.5), p99Ms: at(0.99), maxMs: at(1) };
}

async function timed(fn: () => Promise<unknown>): Promise<Timing> {
  const ms: number[] = [];
  for (let i = 0; i < calls; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  return summary(ms);
}

function* spread(count: number, offset: number) {
  for (let n = 0; n < count; n++)
    yield {
      kind: kinds[n % 4]!,
      args: { n: n + offset },
      options: { priority: (((n >> 2) % 4) + 1) as 1 | 2 | 3 | 4 },
    };
}

/** Loads `count` jobs by COPY and waits until a host has run them all (and, with `pruned`, until its leader
 * has moved them out of the ring into compact history). */
async function complete(
  client: AwaClient,
  url: string,
  count: number,
  offset: number,
  concurrency: number,
  pruned = false,
): Promise<void> {
  if (count === 0) return;
  await client.copyEnqueue(spread(count, offset));
  const host = new WorkerHost({
    connectionString: url,
    queues: Object.fromEntries(QUEUES.map((q) => [q, { concurrency }])),
  });
  for (const k of kinds) host.register(k, async () => {});
  await host.start();
  try {
    for (;;) {
      const left = (await client.counts())
        .filter((q) => QUEUES.includes(q.queue))
        .reduce((s, q) => s + q.available + q.running, 0);
      if (left === 0) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    // The ring's newest slot rotates once it is ringSlotMaxAgeMs old and is pruned after: wait until all but
    // the last slot's worth are in compact history.
    while (pruned && (await compacted(client)) < count - 20_000) await new Promise((r) => setTimeout(r, 500));
  } finally {
    await host.stop();
  }
}

async function compacted(client: AwaClient): Promise<number> {
  const { rows } = await client.pool.query<{ n: string }>(
    `select coalesce(sum(n), 0) as n from ${client.schema.ident}.completed_history`,
  );
  return Number(rows[0]!.n);
}

/** A host holding `running` jobs in their handlers, and one that parked, failed and dead-lettered a few. */
async function liveStates(
  client: AwaClient,
  url: string,
): Promise<{ host: WorkerHost; release: () => void }> {
  let release = () => {};
  const gate = new Promise<void>((r) => (release = r));
  const host = new WorkerHost({
    connectionString: url,
    queues: { held: running || 1, failing: 10, doomed: { concurrency: 10, dlq: true }, parked: 10 },
  });
  host.register(held, () => gate);
  host.register(failing, () => {
    throw new FailJob('failed on purpose');
  });
  host.register(doomed, () => {
    throw new FailJob('dead-lettered on purpose');
  });
  host.register(parked, async (_job, ctx) => {
    await ctx.registerCallback({ timeoutMs: 3_600_000 });
    throw new WaitForCallback();
  });
  await host.start();
  await client.enqueueMany([
    ...Array.from({ length: running }, (_, n) => ({ kind: held, args: { n } })),
    ...Array.from({ length: 200 }, (_, n) => ({ kind: failing, args: { n } })),
    ...Array.from({ length: 200 }, (_, n) => ({ kind: doomed, args: { n } })),
    ...Array.from({ length: 200 }, (_, n) => ({ kind: parked, args: { n } })),
    ...Array.from({ length: 2_000 }, (_, n) => ({
      kind: kinds[n % 4]!,
      args: { n },
      options: { delayMs: 3_600_000 },
    })),
  ]);
  for (;;) {
    const c = await client.counts();
    const of = (q: string) => c.find((x) => x.queue === q);
    if (
      (of('held')?.running ?? 0) === running &&
      of('failing')?.failed === 200 &&
      of('doomed')?.dlq === 200 &&
      of('parked')?.waiting === 200
    )
      break;
    await new Promise((r) => setTimeout(r, 200));
  }
  return { host, release };
}

async function reads(client: AwaClient): Promise<Record<string, Timing>> {
  const one = async (state: Parameters<AwaClient['listJobs']>[0]['state'], queue?: string) =>
    (await client.listJobs({ state, ...(queue ? { queue } : {}), limit: 1 }))[0]!.id;
  const ids = {
    running: await one('running'),
    completedInRing: await one('completed', 'email'),
    available: await one('available', 'backlog'),
    dlq: await one('dlq'),
  };
  const compacted = await client.pool.query<{ id: string }>(
    `select lower(r)::text as id from ${client.schema.ident}.completed_history h, unnest(h.ids) r
      order by h.closed_at limit 1`,
  );
  const list =
    (state: Parameters<AwaClient['listJobs']>[0]['state'], extra: object = {}) =>
    () =>
      client.listJobs({ state, limit: 50, ...extra });
  const rows: Record<string, () => Promise<unknown>> = {
    'queueHealth() (awa queue list, Queues page)': () => client.queueHealth(),
    'counts() (awa queues)': () => client.counts(),
    'listJobs running': list('running'),
    'listJobs running, queue held': list('running', { queue: 'held' }),
    'listJobs available': list('available'),
    'listJobs available, queue backlog': list('available', { queue: 'backlog' }),
    'listJobs scheduled': list('scheduled'),
    'listJobs failed': list('failed'),
    'listJobs waiting_external': list('waiting_external'),
    'listJobs dlq': list('dlq'),
    'listJobs completed': list('completed'),
    'listJobs completed, queue reports': list('completed', { queue: 'reports' }),
    'listJobs completed, kind reports_job': list('completed', { kind: 'reports_job' }),
    'getJob running': () => client.getJob(ids.running),
    'getJob completed (in the pinned ring)': () => client.getJob(ids.completedInRing),
    'getJob completed (compact history)': () => client.getJob(compacted.rows[0]?.id ?? ids.completedInRing),
    'getJob available': () => client.getJob(ids.available),
    'jobProgress running': () => client.jobProgress(ids.running),
    'listDlq (awa dlq list)': () => client.listDlq({ limit: 50 }),
    'ringStatus() (Storage page)': () => client.ringStatus(),
    'storageStatus() (awa storage status)': () => client.storageStatus(),
    'runtimeList() (Runtimes page)': () => client.runtimeList(),
    'compactHistorySpan()': () => client.compactHistorySpan(),
  };
  const out: Record<string, Timing> = {};
  for (const [name, fn] of Object.entries(rows)) out[name] = await timed(fn);
  // Six running searches at once beside the queue list: what the list costs while others search.
  const beside: number[] = [];
  for (let i = 0; i < Math.max(10, calls / 5); i++) {
    const searches = Array.from({ length: 6 }, () => client.listJobs({ state: 'running', limit: 50 }));
    const t = performance.now();
    await client.queueHealth();
    beside.push(performance.now() - t);
    await Promise.all(searches);
  }
  out['queueHealth() beside six running searches'] = summary(beside);
  return out;
}

async function main(): Promise<void> {
  const db = await createDatabase('operator_reads');
  // The pool the dashboard's `serve` has (4), so concurrent reads queue as they would there.
  const client = new AwaClient({ connectionString: db.url, poolSize: 4 });
  const pin = benchClient(db.url, 'operator-reads-pin');
  let live: Awaited<ReturnType<typeof liveStates>> | null = null;
  try {
    await client.migrate();
    const t0 = performance.now();
    // History prune could truncate: it lives in compact history.
    await complete(client, db.url, history - pinned, 0, 250, true);
    // The backlog nobody serves, sealed in a slot of its own: prune stops there from now on.
    await client.copyEnqueue(
      (function* () {
        for (let n = 0; n < backlog; n++)
          yield { kind: 'backlog_job', args: { n }, options: { queue: 'backlog' } };
      })(),
    );
    await client.pool.query(`select ${client.schema.ident}.rotate()`);
    await pin.connect();
    await pin.query('begin isolation level repeatable read');
    await pin.query('select 1');
    await complete(client, db.url, pinned, history - pinned, pinnedConcurrency);
    live = await liveStates(client, db.url);
    // A few leader ticks: the slots sealed last are tallied once their receipts have settled.
    await new Promise((r) => setTimeout(r, 3_000));
    const loadSeconds = Math.round((performance.now() - t0) / 1000);
    const ring = await client.ringStatus();
    const result = {
      history,
      pinned,
      backlog,
      running,
      calls,
      loadSeconds,
      ringRowsEstimate: ring.reduce((s, r) => s + r.readyRows, 0),
      ringSlots: ring.length,
      currentSlotReceipts: ring.at(-1)?.receipts ?? 0,
      compactHistory: await compacted(client),
      reads: await reads(client),
    };
    if (asJson) console.log(JSON.stringify(result));
    else {
      console.log(
        `${history} completed (${pinned} under a pinned snapshot, ${result.compactHistory} in compact history), ` +
          `${backlog} available, ${running} running; ring: ${result.ringSlots} slots, ~${result.currentSlotReceipts} ` +
          `receipts in the current one; load ${loadSeconds} s; ${calls} calls each`,
      );
      for (const [name, r] of Object.entries(result.reads))
        console.log(`  ${name.padEnd(48)} p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms, max ${r.maxMs} ms`);
    }
  } finally {
    live?.release();
    await live?.host.stop().catch(() => {});
    await pin.end().catch(() => {});
    await client.close();
    if (keep) console.error(`kept ${db.url}`);
    else await dropDatabase(db.name);
  }
}

await main();
