// Bench: inline vs worker-thread pool execution.
//
//   npx tsx bench/scenarios/pool.ts [--jobs N] [--work-ms 10] [--runs 3] [--json]
//
// Two workloads, each run inline and in the pool on one worker host:
//   heavy:   N jobs of ~work-ms of sha256 each (CPU-bound)
//   trivial: 50·N jobs that do nothing (so the per-task overhead is all there is), pool with and without
//            batching
// For each mode it reports jobs/s (first enqueue → last completion, after a warm-up) and the
// coordinator's event-loop delay p99 (perf_hooks.monitorEventLoopDelay, 10 ms resolution), median of
// --runs runs. Uses DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres; creates and drops its
// own database.
//
// This file is also the handlers module the pool threads load (it exports `handlers`); main() only runs
// when the file is the process's entry point.

import { createHash } from 'node:crypto';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';
import pg from 'pg';
import {
  AwaClient,
  defineHandler,
  defineJob,
  WorkerHost,
  type HandlerEntry,
  type WorkerOptions,
} from '../../src/index.js';
import { median } from '../scenario.js';

const BLOCK = Buffer.alloc(64 * 1024, 3);

function hash(rounds: number): void {
  let digest = createHash('sha256').update(BLOCK).digest();
  for (let i = 1; i < rounds; i++) digest = createHash('sha256').update(BLOCK).update(digest).digest();
}

const heavyInline = defineJob<{ rounds: number }>({ kind: 'bench_heavy_inline' });
const heavyPool = defineJob<{ rounds: number }>({ kind: 'bench_heavy_pool', execution: 'pool' });
const trivialInline = defineJob<{ n: number }>({ kind: 'bench_trivial_inline' });
const trivialPool = defineJob<{ n: number }>({ kind: 'bench_trivial_pool', execution: 'pool' });

export const handlers = [
  defineHandler(heavyInline, (job) => hash(job.args.rounds)),
  defineHandler(heavyPool, (job) => hash(job.args.rounds)),
  defineHandler(trivialInline, () => {}),
  defineHandler(trivialPool, () => {}),
];

interface Mode {
  name: string;
  kind: typeof heavyInline | typeof trivialInline;
  jobs: number;
  concurrency: number;
  threadPool?: WorkerOptions['threadPool'];
  args: (n: number) => Record<string, number>;
}

interface Result {
  name: string;
  jobs: number;
  jobsPerSec: number;
  eldP99Ms: number;
}

function option(argv: string[], name: string, dflt: number): number {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return dflt;
  const v = Number(argv[i + 1]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`--${name} needs a positive number`);
  return v;
}

async function runMode(url: string, client: AwaClient, mode: Mode, run: number): Promise<Result> {
  const queue = `bench_${mode.name.replace(/\W+/g, '_')}_${run}`;
  const host = new WorkerHost({
    connectionString: url,
    queues: { [queue]: mode.concurrency },
    maintenance: false,
    threadPool: mode.threadPool,
  });
  if (!mode.threadPool)
    host.registerAll(handlers.filter((h) => h.kind.execution !== 'pool') as unknown as HandlerEntry<never>[]);
  let completed = 0;
  let target = 0;
  let finished: () => void = () => {};
  host.on('settled', (s, ok) => {
    if (ok && s.outcome === 'completed' && ++completed === target) finished();
  });
  await host.start();
  const enqueue = async (count: number, offset: number) => {
    const rows = Array.from({ length: count }, (_, i) => ({
      kind: mode.kind,
      args: mode.args(offset + i),
      options: { queue },
    }));
    for (let i = 0; i < rows.length; i += 5_000) await client.enqueueMany(rows.slice(i, i + 5_000));
  };
  // Warm-up (threads booting, JIT): not measured.
  const warm = Math.min(mode.jobs, 64);
  target = warm;
  await new Promise<void>((resolve) => {
    finished = resolve;
    void enqueue(warm, 0);
  });
  completed = 0;
  target = mode.jobs;
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const t0 = performance.now();
  const done = new Promise<void>((resolve) => (finished = resolve));
  await enqueue(mode.jobs, warm);
  await done;
  const seconds = (performance.now() - t0) / 1000;
  delay.disable();
  await host.stop();
  return {
    name: mode.name,
    jobs: mode.jobs,
    jobsPerSec: mode.jobs / seconds,
    eldP99Ms: delay.percentile(99) / 1e6,
  };
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const jobs = option(argv, 'jobs', 200);
  const workMs = option(argv, 'work-ms', 10);
  const runs = option(argv, 'runs', 3);
  const server = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const dbName = `awa_bench_pool_${Date.now().toString(36)}`;
  const admin = new pg.Client(server);
  await admin.connect();
  await admin.query(`create database "${dbName}"`);
  const u = new URL(server);
  u.pathname = `/${dbName}`;
  const url = u.toString();
  const client = new AwaClient({ connectionString: url });
  try {
    await client.migrate();
    // Calibrate: the fastest of a few timings of 200 rounds (a busy box makes single timings noisy).
    let best = Infinity;
    for (let i = 0; i < 7; i++) {
      const t0 = performance.now();
      hash(200);
      best = Math.min(best, performance.now() - t0);
    }
    const rounds = Math.max(1, Math.round((200 * workMs) / best));
    const module = fileURLToPath(import.meta.url);
    const modes: Mode[] = [
      { name: `heavy inline`, kind: heavyInline, jobs, concurrency: 8, args: () => ({ rounds }) },
      {
        name: `heavy pool`,
        kind: heavyPool,
        jobs,
        concurrency: 8,
        threadPool: { module },
        args: () => ({ rounds }),
      },
      {
        name: 'trivial inline',
        kind: trivialInline,
        jobs: jobs * 50,
        concurrency: 256,
        args: (n) => ({ n }),
      },
      {
        name: 'trivial pool maxBatch=1',
        kind: trivialPool,
        jobs: jobs * 50,
        concurrency: 256,
        threadPool: { module, maxBatch: 1 },
        args: (n) => ({ n }),
      },
      {
        name: 'trivial pool maxBatch=64',
        kind: trivialPool,
        jobs: jobs * 50,
        concurrency: 256,
        threadPool: { module, maxBatch: 64 },
        args: (n) => ({ n }),
      },
    ];
    const results: Result[] = [];
    for (const mode of modes) {
      const each: Result[] = [];
      for (let r = 0; r < runs; r++) each.push(await runMode(url, client, mode, r));
      const res = {
        name: mode.name,
        jobs: mode.jobs,
        jobsPerSec: median(each.map((e) => e.jobsPerSec)),
        eldP99Ms: median(each.map((e) => e.eldP99Ms)),
      };
      results.push(res);
      console.error(
        `${res.name}: runs ${each.map((e) => `${e.jobsPerSec.toFixed(0)}/s p99 ${e.eldP99Ms.toFixed(1)} ms`).join(' | ')}`,
      );
    }
    if (argv.includes('--json')) {
      console.log(JSON.stringify({ workMs, rounds, runs, results }, null, 2));
    } else {
      console.log(`\nheavy = ~${workMs} ms of sha256 per job (${rounds} rounds); median of ${runs} runs`);
      console.log('| mode | jobs | jobs/s | event-loop delay p99 |');
      console.log('| --- | ---: | ---: | ---: |');
      for (const r of results)
        console.log(`| ${r.name} | ${r.jobs} | ${r.jobsPerSec.toFixed(0)} | ${r.eldP99Ms.toFixed(1)} ms |`);
    }
  } finally {
    await client.close();
    await admin.query(
      `select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`,
      [dbName],
    );
    await admin.query(`drop database if exists "${dbName}"`);
    await admin.end();
  }
}

if (isMainThread && process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
