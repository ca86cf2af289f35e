import { setTimeout as sleep } from 'node:timers/promises';
import type { EmbeddedPostgres } from '../../embedded/launcher.js';
import { defineJob } from '../../model/job-kind.js';
import { AwaClient, WorkerHost } from '../../roles.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import type { CliContext } from '../io.js';
import { ProgressBar } from '../../terminal/progress.js';

export const demoOptions: Record<string, OptionSpec> = {
  'database-url': {
    type: 'string',
    description: 'use this PostgreSQL (default: $DATABASE_URL, else an embedded one)',
  },
  jobs: { type: 'number', description: 'jobs to enqueue and drain (default 100000)' },
  concurrency: { type: 'number', description: 'handler concurrency of the worker host (default 1000)' },
  json: { type: 'boolean', description: 'print the figures as one JSON object' },
};

const demoJob = defineJob<{ n: number }>({ kind: 'demo_noop', queue: 'demo' });

/**
 * The main job, end to end: bulk-enqueue N jobs through COPY, drain them with a worker host, then probe
 * pickup latency with single enqueues into the idle queue. Runs on an embedded PostgreSQL when no
 * database is given, in a schema of its own that it drops afterwards when the database is yours.
 */
export async function demoCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parseArgs(argv, demoOptions);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const jobs = Math.max(1, Math.floor((values.jobs as number | undefined) ?? 100_000));
  const concurrency = Math.max(1, Math.floor((values.concurrency as number | undefined) ?? 1000));
  let url = (values['database-url'] as string | undefined) ?? ctx.env.DATABASE_URL;
  let embedded: EmbeddedPostgres | null = null;
  const log = ctx.err;
  if (!url) {
    log('no DATABASE_URL: starting an embedded PostgreSQL…');
    // Loaded only when needed: a demo against your own database never touches the launcher.
    const { EmbeddedPostgres: Launcher } = await import('../../embedded/launcher.js');
    embedded = await Launcher.start();
    url = embedded.url;
    log(`embedded PostgreSQL ready on port ${embedded.port}`);
  }
  const schema = embedded ? 'awa' : `awa_demo_${process.pid}_${Date.now().toString(36)}`;
  const client = new AwaClient({ connectionString: url, schema });
  let host: WorkerHost | null = null;
  const cleanup = async () => {
    await host?.stop().catch(() => {});
    if (!embedded)
      await client.pool.query(`drop schema if exists ${client.schema.ident} cascade`).catch(() => {});
    await client.close().catch(() => {});
    await embedded?.destroy().catch(() => {});
  };
  // Ctrl-C: stop producing, clean up (host, schema, embedded server) and exit; the main path, which
  // may now fail against the stopped server, then just waits for that exit.
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    log('\ninterrupted: cleaning up…');
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await client.migrate();
    log(`schema "${schema}" migrated; enqueueing ${jobs.toLocaleString('en-US')} jobs through COPY`);

    const enqueueBar = new ProgressBar('enqueue', jobs);
    const t0 = performance.now();
    const source = (function* () {
      for (let n = 0; n < jobs && !interrupted; n++) yield { kind: demoJob, args: { n } };
    })();
    await client.copyEnqueue(source, { onProgress: (n) => enqueueBar.update(n) });
    if (interrupted) await new Promise(() => {});
    const enqueueSeconds = (performance.now() - t0) / 1000;
    enqueueBar.finish(jobs);

    host = new WorkerHost({ connectionString: url, schema, queues: { demo: { concurrency } } });
    let handled = 0;
    host.register(demoJob, () => {
      handled++;
    });
    const drainBar = new ProgressBar('drain', jobs);
    const t1 = performance.now();
    await host.start();
    await waitFor(
      () => host!.stats.completed >= jobs,
      () => drainBar.update(host!.stats.completed),
    );
    const drainSeconds = (performance.now() - t1) / 1000;
    drainBar.finish(host.stats.completed);

    // Latency probe: single enqueues, spaced out, into a queue the host is idling on.
    host.stats.pickupUs.reset();
    const probes = Math.min(500, jobs);
    const before = host.stats.completed;
    for (let i = 0; i < probes; i++) {
      await client.enqueue(demoJob, { n: -i });
      await sleep(4);
    }
    await waitFor(
      () => host!.stats.completed >= before + probes,
      () => {},
    );
    const stats = host.stats.snapshot();
    const counts = await client.counts();
    const figures = {
      jobs,
      concurrency,
      enqueueJobsPerSec: Math.round(jobs / enqueueSeconds),
      drainJobsPerSec: Math.round(jobs / drainSeconds),
      handled,
      pickupProbes: probes,
      pickupP50Ms: stats.pickupP50Ms,
      pickupP99Ms: stats.pickupP99Ms,
      claimCalls: stats.claimCalls,
      settleFlushes: stats.flushes,
      queue: counts.find((c) => c.queue === 'demo') ?? null,
      postgres: embedded ? 'embedded' : 'DATABASE_URL',
    };
    if (values.json) ctx.out(JSON.stringify(figures));
    else ctx.out(figuresText(figures));
  } catch (err) {
    if (!interrupted) throw err;
  } finally {
    if (!interrupted) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      await cleanup();
    }
  }
  if (interrupted) await new Promise(() => {});
}

function figuresText(f: Record<string, unknown> & { queue: unknown }): string {
  const q = f.queue as { failed: number; available: number; running: number } | null;
  return `
Awa demo (${f.postgres as string} PostgreSQL)
  enqueue (COPY)    ${fmt(f.enqueueJobsPerSec)} jobs/s   (${fmt(f.jobs)} jobs)
  drain             ${fmt(f.drainJobsPerSec)} jobs/s   (concurrency ${fmt(f.concurrency)}, ${fmt(f.claimCalls)} claim calls, ${fmt(f.settleFlushes)} settle flushes)
  pickup latency    p50 ${String(f.pickupP50Ms)} ms, p99 ${String(f.pickupP99Ms)} ms   (${fmt(f.pickupProbes)} single enqueues into an idle queue)
  queue "demo"      ${q ? `${fmt(q.failed)} failed, ${fmt(q.available)} waiting, ${fmt(q.running)} running` : 'n/a'}`;
}

function fmt(v: unknown): string {
  return typeof v === 'number' ? v.toLocaleString('en-US') : String(v);
}

async function waitFor(done: () => boolean, tick: () => void): Promise<void> {
  while (!done()) {
    tick();
    await sleep(20);
  }
}
