// What the operator surfaces cost on a large backlog: the reads behind `awa queue list`, `awa job list`,
// `awa storage status` and the dashboard, timed on a database holding --jobs runnable jobs (default 10M,
// COPY-loaded across four queues and all four priorities) plus --done completed ones (drained by a worker
// host first, so history and the ring hold them):
//
//   npx tsx bench/operator-reads.ts [--jobs 10000000] [--done 200000] [--calls 20] [--json]
//
// Each read runs --calls times on a warm connection pool; prints the median and the slowest. Uses
// DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432) and creates and drops its own database.
import { AwaClient, defineJob, WorkerHost } from '../src/index.js';
import { createDatabase, dropDatabase } from './database.js';

const args = process.argv.slice(2);
const opt = (name: string, dflt: number) => {
  const i = args.indexOf(`--${name}`);
  const v = i >= 0 ? Number(args[i + 1]) : dflt;
  if (!Number.isInteger(v) || v < 0) throw new Error(`--${name} must be a whole number, got ${args[i + 1]}`);
  return v;
};
const jobs = opt('jobs', 10_000_000);
const done = opt('done', 200_000);
const calls = opt('calls', 20);
const asJson = args.includes('--json');

const QUEUES = ['email', 'billing', 'reports', 'webhooks'];
const kinds = QUEUES.map((queue) => defineJob<{ n: number }>({ kind: `${queue}_job`, queue }));

async function timed(fn: () => Promise<unknown>): Promise<{ medianMs: number; maxMs: number }> {
  const ms: number[] = [];
  for (let i = 0; i < calls; i++) {
    const t = performance.now();
    await fn();
    ms.push(performance.now() - t);
  }
  ms.sort((a, b) => a - b);
  const round = (x: number) => Math.round(x * 100) / 100;
  return { medianMs: round(ms[Math.floor(ms.length / 2)]!), maxMs: round(ms[ms.length - 1]!) };
}

async function main(): Promise<void> {
  const db = await createDatabase('operator_reads');
  const client = new AwaClient({ connectionString: db.url, poolSize: 4 });
  try {
    await client.migrate();
    // History first: a worker host drains `done` jobs of the first queue, so completed jobs exist to list.
    if (done > 0) {
      await client.copyEnqueue(
        (function* () {
          for (let n = 0; n < done; n++) yield { kind: kinds[0]!, args: { n } };
        })(),
      );
      const host = new WorkerHost({
        connectionString: db.url,
        queues: { [QUEUES[0]!]: { concurrency: 500 } },
      });
      host.register(kinds[0]!, async () => {});
      await host.start();
      for (;;) {
        const c = (await client.counts()).find((q) => q.queue === QUEUES[0]);
        if (!c || c.available + c.running === 0) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      await host.stop();
    }
    const t0 = performance.now();
    await client.copyEnqueue(
      (function* () {
        for (let n = 0; n < jobs; n++)
          yield {
            kind: kinds[n % 4]!,
            args: { n },
            options: { priority: (((n >> 2) % 4) + 1) as 1 | 2 | 3 | 4 },
          };
      })(),
    );
    const loadSeconds = (performance.now() - t0) / 1000;
    const [someJob] = await client.listJobs({ state: 'available', queue: 'reports', limit: 1 });
    const rows = {
      'queueHealth() (awa queue list)': await timed(() => client.queueHealth()),
      'counts() (awa queues)': await timed(() => client.counts()),
      'listJobs available, first page of 50': await timed(() =>
        client.listJobs({ state: 'available', queue: 'billing', limit: 50 }),
      ),
      'listJobs completed, first page of 50': await timed(() =>
        client.listJobs({ state: 'completed', queue: QUEUES[0]!, limit: 50 }),
      ),
      'getJob(id)': await timed(() => client.getJob(someJob!.id)),
      'ringStatus()': await timed(() => client.ringStatus()),
      'storageStatus() (awa storage status)': await timed(() => client.storageStatus()),
    };
    const result = { jobs, done, calls, loadSeconds: Math.round(loadSeconds), reads: rows };
    if (asJson) console.log(JSON.stringify(result));
    else {
      console.log(
        `${jobs} available + ${done} completed jobs (COPY load ${result.loadSeconds} s); ${calls} calls each`,
      );
      for (const [name, r] of Object.entries(rows))
        console.log(`  ${name}: median ${r.medianMs} ms, max ${r.maxMs} ms`);
    }
  } finally {
    await client.close();
    await dropDatabase(db.name);
  }
}

await main();
