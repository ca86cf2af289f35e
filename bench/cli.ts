import { loadavg } from 'node:os';
import { MAX_ENQUEUE_SHARDS } from '../src/index.js';
import { ProgressBar } from '../src/terminal/progress.js';
import { BenchUsageError, parseBenchArgs } from './args.js';
import type { SystemAdapter } from './adapter.js';
import { makeAdapter, OTEL_MODES, SYSTEMS, withOtel, withPooler, withSqlProducer } from './systems.js';
import {
  adminUrl,
  benchClient,
  createDatabase,
  dropAllCreated,
  dropDatabase,
  sampleSchema,
} from './database.js';
import { describeEnvironment, type Environment } from './environment.js';
import { benchOptions } from './options.js';
import { throughPooler, validatePoolerUrl } from './pooler.js';
import { formatTable, jsonLine, medianRun, writeReportDir } from './report.js';
import type { ResultRow } from './result-row.js';
import { RssSampler } from './rss.js';
import { sleep } from './pace.js';
import type { Measurement, Scenario, ScenarioOptions } from './scenario.js';
import { drainScenario } from './scenarios/drain.js';
import { enqueueScenario } from './scenarios/enqueue.js';
import { latencyScenario, WARMUP_MS } from './scenarios/latency.js';
import { microScenario } from './scenarios/micro.js';
import { mixedScenario } from './scenarios/mixed.js';
import { pinnedScenario } from './scenarios/pinned.js';
import { producersScenario } from './scenarios/producers.js';
import { soakScenario } from './scenarios/soak.js';
import { stepsScenario } from './scenarios/steps.js';
import { flowScenario } from './scenarios/flow.js';
import { limitsScenario } from './scenarios/limits.js';

// `awa bench <scenario>`: runs one scenario for one system or all of them, each run in databases of its
// own that are dropped afterwards (also on Ctrl-C), and reports the median of --runs runs.

const SCENARIOS: Record<string, Scenario> = {
  enqueue: enqueueScenario,
  drain: drainScenario,
  latency: latencyScenario,
  pinned: pinnedScenario,
  soak: soakScenario,
  producers: producersScenario,
  mixed: mixedScenario,
  micro: microScenario,
  'steps-1': stepsScenario(1),
  'steps-3': stepsScenario(3),
  flow: flowScenario(),
  limits: limitsScenario(),
};

/** Defaults per scenario: duration (s) for the time-based ones. */
const DEFAULT_DURATION: Record<string, number> = {
  latency: 20,
  pinned: 120,
  soak: 600,
  producers: 10,
  micro: 5,
};

export const benchUsage = `awa bench <${Object.keys(SCENARIOS).join('|')}> [options]`;

function int(v: unknown, dflt: number, name: string, min = 1): number {
  if (v === undefined) return dflt;
  const n = Math.floor(v as number);
  if (n < min) throw new BenchUsageError(`--${name} must be at least ${min}`);
  return n;
}

export async function benchCommand(argv: string[]): Promise<void> {
  const { positionals, values } = parseBenchArgs(argv, benchOptions);
  const name = positionals[0];
  const scenario = name ? SCENARIOS[name] : undefined;
  if (!name || !scenario)
    throw new BenchUsageError(`${name ? `unknown scenario "${name}"; ` : ''}usage: ${benchUsage}`);
  if (positionals.length > 1)
    throw new BenchUsageError(`unexpected argument "${positionals[1]}"; usage: ${benchUsage}`);
  if (values['database-url']) process.env.DATABASE_URL = values['database-url'] as string;
  const opts: ScenarioOptions = {
    jobs: int(values.jobs, name === 'limits' ? 20_000 : 100_000, 'jobs'),
    concurrency: int(values.concurrency ?? values.workers, 1000, 'concurrency'),
    duration: int(values.duration, DEFAULT_DURATION[name] ?? 60, 'duration'),
    rate: int(values.rate, name === 'mixed' ? 100 : 500, 'rate'),
    sampleEvery: int(values.sample, 5, 'sample'),
    payloadBytes: int(values.payload, 0, 'payload', 0),
    producers: int(values.producers, name === 'mixed' ? 8 : 32, 'producers', name === 'mixed' ? 0 : 1),
    holdMs: int(values['hold-ms'], 20, 'hold-ms', 0),
    processes: int(values.processes, 0, 'processes'),
    unique: values.unique === true,
    single: values.single === true,
    otelSample: (values['otel-sample'] as number | undefined) ?? 1,
    shards: int(values.shards, 1, 'shards'),
    prefetch: values.prefetch === undefined ? undefined : int(values.prefetch, 0, 'prefetch', 0),
    handlerUs: int(values['handler-us'], 0, 'handler-us', 0),
    results: values.results === true,
    handlerMs: int(values['handler-ms'], 0, 'handler-ms', 0),
    longJobs: int(values.long, 8, 'long', 0),
    rollback: (values.rollback as number | undefined) ?? 0.1,
    poolerUrl: values['pooler-url'] === undefined ? undefined : validatePoolerUrl(values['pooler-url']),
  };
  if (name === 'mixed' && opts.longJobs >= opts.concurrency)
    throw new BenchUsageError(`--long (${opts.longJobs}) must be below --concurrency (${opts.concurrency})`);
  if (!(opts.rollback >= 0 && opts.rollback <= 1))
    throw new BenchUsageError(`--rollback must be a fraction in [0, 1], got ${opts.rollback}`);
  if (values.single !== undefined && name !== 'enqueue')
    throw new BenchUsageError('--single applies to enqueue only');
  for (const [flag, applies] of [
    ['handler-ms', name === 'mixed'],
    ['long', name === 'mixed'],
    ['rollback', name === 'mixed'],
  ] as const)
    if (values[flag] !== undefined && !applies) throw new BenchUsageError(`--${flag} applies to mixed only`);
  if (opts.single && opts.unique)
    throw new BenchUsageError('--unique applies to the bulk enqueue, not --single');
  if (name === 'latency' && opts.duration * 1000 <= WARMUP_MS)
    throw new BenchUsageError(
      `--duration must be more than ${WARMUP_MS / 1000} s for latency: its first ${WARMUP_MS / 1000} s are warm-up and not measured`,
    );
  if (opts.shards > MAX_ENQUEUE_SHARDS)
    throw new BenchUsageError(`--shards must be from 1 to ${MAX_ENQUEUE_SHARDS}, got ${opts.shards}`);
  if (opts.handlerUs > 0 && (name !== 'drain' || opts.processes > 0))
    throw new BenchUsageError('--handler-us applies to drain with in-process workers (not --processes)');
  if (opts.results && (name !== 'drain' || opts.processes > 0))
    throw new BenchUsageError('--results applies to drain with in-process workers (not --processes)');
  if (!(opts.otelSample > 0 && opts.otelSample <= 1))
    throw new BenchUsageError(`--otel-sample must be a fraction in (0, 1], got ${opts.otelSample}`);
  const runs = int(values.runs, 1, 'runs');
  const system = (values.system as string | undefined) ?? 'all';
  if (system !== 'all' && !SYSTEMS.includes(system)) {
    throw new BenchUsageError(`--system must be one of ${[...SYSTEMS, 'all'].join(', ')}, got "${system}"`);
  }
  if (system === 'baseline' && (scenario.kind !== 'system' || !scenario.systemsForAll.includes(system))) {
    throw new BenchUsageError(`--system baseline is not a queue; it runs in the producers scenario only`);
  }
  const otel = (values.otel as string | undefined) ?? 'none';
  if (!(OTEL_MODES as readonly string[]).includes(otel)) {
    throw new BenchUsageError(`--otel must be one of ${OTEL_MODES.join(', ')}, got "${otel}"`);
  }
  const otelMode = otel as (typeof OTEL_MODES)[number];
  if (opts.poolerUrl !== undefined) {
    // One row, awa through the pooler: run it beside a direct run of the same command for the comparison.
    if (scenario.kind !== 'system' || system !== 'awa')
      throw new BenchUsageError('--pooler-url applies to the system scenarios with --system awa');
    if (opts.processes > 0 || otelMode !== 'none')
      throw new BenchUsageError('--pooler-url cannot be combined with --processes or --otel');
  }
  if (otelMode !== 'none') {
    if (scenario.kind !== 'system') throw new BenchUsageError(`--otel applies to the system scenarios only`);
    if (system !== 'all' && system !== 'awa') throw new BenchUsageError(`--otel applies to the awa system`);
    // Worker processes do not load the SDK: their rows would not be what the label says.
    if (opts.processes > 0) throw new BenchUsageError('--otel cannot be combined with --processes');
  } else if (opts.otelSample !== 1) {
    throw new BenchUsageError('--otel-sample applies with --otel sdk or both');
  }
  const json = Boolean(values.json);
  const emit = (row: ResultRow) => {
    if (json) process.stdout.write(jsonLine(row) + '\n');
  };

  const rows: ResultRow[] = [];
  if (scenario.kind === 'standalone') {
    const rss = new RssSampler();
    const t0 = performance.now();
    const m = await scenario.run(opts);
    rows.push(toRow(name, 'awa', opts, m, (performance.now() - t0) / 1000, rss.stop(), {}, null));
    emit(rows[0]!);
  } else {
    let systems = withPooler(
      withSqlProducer(withOtel(system === 'all' ? scenario.systemsForAll : [system], otelMode), opts.single),
      opts.poolerUrl,
    );
    if (opts.processes > 0) {
      // Worker processes are an awa-only mode (the peers have their own multi-process stories); under
      // --system all it runs the systems that support it.
      if (name !== 'drain') throw new BenchUsageError('--processes applies to the drain scenario only');
      systems = systems.filter((s) => makeAdapter(s).spawnWorkerProcesses !== undefined);
      if (systems.length === 0) throw new BenchUsageError(`--processes is not supported by ${system}`);
    }
    const environment = await describeEnvironment(adminUrl());
    const interrupted = trapSignals();
    try {
      // Round-robin (run 1 of every system, then run 2, …) rather than all runs of one system in a row:
      // on a machine shared with other work, each system then meets the same spread of load.
      const results = new Map<string, ResultRow[]>(systems.map((s) => [s, []]));
      for (let r = 0; r < runs; r++) {
        for (const sys of systems) {
          if (runs > 1) process.stderr.write(`${name} ${sys}: run ${r + 1}/${runs}\n`);
          results.get(sys)!.push(await runOnce(name, scenario, sys, opts, environment, interrupted));
        }
      }
      const key = name === 'latency' ? (x: ResultRow) => x.p50Ms : (x: ResultRow) => x.jobsPerSec;
      for (const sys of systems) {
        const row = medianRun(results.get(sys)!, key);
        rows.push(row);
        emit(row);
      }
    } finally {
      // Interrupted: the run broke off (its database dropped under it) or ended; either way the signal
      // handler is dropping what was created and will exit 130. Finishing here would race it.
      if (interrupted.stopping) await new Promise<never>(() => {});
      interrupted.release();
      await dropAllCreated();
    }
  }
  if (!json) console.log(formatTable(name, rows));
  if (values.report) await writeReportDir(values.report as string, rows);
}

interface Interrupt {
  current: SystemAdapter | null;
  /** A signal came: the handler drops the databases and exits; the run must not finish on its own. */
  stopping: boolean;
  release(): void;
}

/** Ctrl-C / SIGTERM: stop the system under test and drop every database this process created. */
function trapSignals(): Interrupt {
  const state: Interrupt = {
    current: null,
    stopping: false,
    release: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
  const onSignal = () => {
    if (state.stopping) process.exit(130); // a second Ctrl-C: give up on cleanup
    state.stopping = true;
    process.stderr.write('\ninterrupted: stopping and dropping the bench databases…\n');
    const stop = state.current?.stop().catch(() => {}) ?? Promise.resolve();
    void Promise.race([stop, sleep(5_000)])
      .then(() => dropAllCreated())
      .finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return state;
}

async function runOnce(
  name: string,
  scenario: Extract<Scenario, { kind: 'system' }>,
  system: string,
  opts: ScenarioOptions,
  environment: Environment,
  interrupt: Interrupt,
): Promise<ResultRow> {
  // The machine's 1-minute load when the run began: on shared cores it says what else was running.
  const loadAvg1m = Math.round(loadavg()[0]! * 100) / 100;
  const db = await createDatabase(system);
  const adapter = makeAdapter(system, opts);
  interrupt.current = adapter;
  const rss = new RssSampler();
  try {
    await adapter.setup(db.url);
    const t0 = performance.now();
    const m = await scenario.run({
      adapter,
      url: db.url,
      appUrl: opts.poolerUrl ? throughPooler(opts.poolerUrl, db.url) : db.url,
      opts,
      progress: (label, total) => new ProgressBar(label, total),
    });
    const seconds = (performance.now() - t0) / 1000;
    const settings = adapter.settings();
    await adapter.stop();
    const peakRssMb = rss.stop();
    // After stop() every backend has exited and flushed its table statistics.
    const final = m.deadTuples === undefined ? await sampleAfter(db.url, adapter.schema) : null;
    const measured = { ...m, extra: { ...m.extra, loadAvg1m } };
    return toRow(name, system, opts, measured, seconds, peakRssMb, settings, environment, final);
  } finally {
    rss.stop();
    await adapter.stop().catch(() => {});
    interrupt.current = null;
    await dropDatabase(db.name);
  }
}

async function sampleAfter(url: string, schema: string): Promise<{ dead: number; live: number }> {
  await sleep(500);
  const client = benchClient(url);
  await client.connect();
  try {
    return await sampleSchema(client, schema);
  } finally {
    await client.end();
  }
}

function toRow(
  scenario: string,
  system: string,
  opts: ScenarioOptions,
  m: Measurement,
  seconds: number,
  peakRssMb: number,
  settings: Record<string, unknown>,
  environment: Environment | null,
  final: { dead: number; live: number } | null = null,
): ResultRow {
  const num = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? null : v);
  return {
    scenario,
    system,
    jobs: m.jobs ?? null,
    concurrency: m.concurrency ?? (scenario === 'micro' ? null : opts.concurrency),
    seconds: m.seconds ?? Math.round(seconds * 1000) / 1000,
    jobsPerSec: m.jobsPerSec ?? null,
    p50Ms: num(m.p50Ms ?? undefined),
    p95Ms: num(m.p95Ms ?? undefined),
    p99Ms: num(m.p99Ms ?? undefined),
    maxMs: num(m.maxMs ?? undefined),
    deadTuples: m.deadTuples ?? final?.dead ?? null,
    liveTuples: m.liveTuples ?? final?.live ?? null,
    peakRssMb,
    runs: 1,
    runJobsPerSec: [m.jobsPerSec ?? null],
    settings,
    extra: m.extra ?? {},
    ...(environment ? { environment } : {}),
  };
}
