import type pg from 'pg';
import type { BenchArgs } from './adapter.js';
import { benchClient, sampleSchema } from './database.js';
import { LatencyHistogram } from './latency-histogram.js';
import { nowMs, Pacer, sleep } from './pace.js';
import { makeArgs, round, type Measurement, type ScenarioContext } from './scenario.js';

// A steady run: producer batches paced at the offered rate while workers process, sampled every few
// seconds (throughput per interval, queue depth, dead/live tuples and size of every table of the system's
// schema). With `pin`, a second connection holds a REPEATABLE READ snapshot with an xid the whole time,
// so the xmin horizon cannot advance and VACUUM can remove nothing: what a system leaves behind as dead
// tuples then stays, and the question is whether its throughput degrades over it.

const TICK_MS = 10;
const BATCH_MAX = 128;

export interface SeriesPoint {
  t: number;
  jobsPerSec: number;
  enqueuedPerSec: number;
  depth: number;
  dead: number;
  live: number;
  bytes: number;
}

export async function steadyRun(ctx: ScenarioContext, pin: boolean): Promise<Measurement> {
  const { adapter, opts, url } = ctx;
  const hist = new LatencyHistogram();
  let handled = 0;
  await adapter.startWorkers(opts.concurrency, (args: BenchArgs) => {
    handled++;
    hist.recordMs(nowMs() - args.t);
  });

  const sampler = benchClient(url, 'awa-bench-sampler');
  await sampler.connect();
  let pinClient: pg.Client | null = null;
  if (pin) {
    pinClient = benchClient(url, 'awa-bench-pin');
    await pinClient.connect();
    await pinClient.query('begin isolation level repeatable read');
    await pinClient.query('select txid_current()');
  }

  const make = makeArgs(opts.payloadBytes);
  const bar = ctx.progress(`${pin ? 'pinned' : 'soak'} ${adapter.label}`, opts.duration);
  const series: SeriesPoint[] = [];
  const start = performance.now();
  const end = start + opts.duration * 1000;
  const pacer = new Pacer(opts.rate, start);
  let producerErrors = 0;
  let i = 0;

  const producer = (async () => {
    while (performance.now() < end) {
      let owed = pacer.owed();
      while (owed > 0) {
        const n = Math.min(owed, BATCH_MAX);
        const batch = Array.from({ length: n }, () => make(i++));
        pacer.sent(n);
        owed -= n;
        await adapter.enqueueBatch(batch).catch(() => producerErrors++);
      }
      await sleep(TICK_MS);
    }
  })();

  let last = { at: start, handled: 0, issued: 0 };
  while (performance.now() < end) {
    await sleep(Math.min(opts.sampleEvery * 1000, Math.max(0, end - performance.now())));
    const now = performance.now();
    const dt = (now - last.at) / 1000;
    const [depth, schema] = await Promise.all([adapter.depth(), sampleSchema(sampler, adapter.schema)]);
    series.push({
      t: round((now - start) / 1000, 1),
      jobsPerSec: Math.round((handled - last.handled) / dt),
      enqueuedPerSec: Math.round((pacer.issued - last.issued) / dt),
      depth,
      dead: schema.dead,
      live: schema.live,
      bytes: schema.bytes,
    });
    last = { at: now, handled, issued: pacer.issued };
    bar.update(Math.floor((now - start) / 1000));
  }
  await producer;
  const seconds = (performance.now() - start) / 1000;
  bar.finish(opts.duration);
  // The final dead-tuple figure is taken while the snapshot is still held: that is what the pin costs.
  const final = await sampleSchema(sampler, adapter.schema);
  await pinClient?.query('rollback');
  await pinClient?.end();
  await sampler.end();

  // Full sample intervals only (the last one may be a fraction of a period).
  const full = series.length > 2 ? series.slice(0, -1) : series;
  const first = full[0]?.jobsPerSec ?? 0;
  const lastRate = full[full.length - 1]?.jobsPerSec ?? 0;
  return {
    jobs: handled,
    seconds: round(seconds, 1),
    jobsPerSec: Math.round(handled / seconds),
    ...hist.summaryMs(),
    deadTuples: final.dead,
    liveTuples: final.live,
    extra: {
      offeredRate: opts.rate,
      enqueued: pacer.issued,
      producerErrors,
      firstIntervalJobsPerSec: first,
      lastIntervalJobsPerSec: lastRate,
      changePct: first ? round(((lastRate - first) / first) * 100, 1) : null,
      maxDepth: Math.max(0, ...series.map((p) => p.depth)),
      finalDepth: series[series.length - 1]?.depth ?? 0,
      peakDeadTuples: Math.max(final.dead, ...series.map((p) => p.dead)),
      finalBytes: final.bytes,
      deadPerJob: handled ? round(final.dead / handled, 3) : null,
      maintenance: await adapter.maintenance(),
      tables: final.tables,
      series,
    },
  };
}
