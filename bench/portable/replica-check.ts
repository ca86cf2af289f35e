// Checks the portable adapter against the harness contract with two replicas on one database while one
// of them is SIGKILLed and restarted every --kill-every seconds (alternating between them):
//
//   npx tsx bench/portable/replica-check.ts [--seconds 120] [--kill-every 20] [--rate 200] [--work-ms 50] [--json]
//
// 1. EPIPE: a replica whose stdout the reader closes exits 0, without a stack trace.
// 2. Two replicas (BENCH_INSTANCE_ID 0 and 1) produce --rate jobs/s each and work them (--work-ms each,
//    so a kill leaves attempts in flight that the maintenance leader must rescue); every --kill-every s
//    one is SIGKILLed right after one of its metric ticks and restarted.
// 3. Producers stop (rate file → 0); once the database says nothing is waiting, running or due, both
//    replicas get SIGTERM and must exit 0 within 5 s.
// Then, from the database and from the replicas' JSONL:
//   - the leader rescued the killed processes' attempts (per its log);
//   - nothing is stuck: every job enqueued is completed (none available, running, scheduled, retryable,
//     failed or cancelled);
//   - every line carries its replica's instance_id, and event_tables are schema-qualified, existing tables;
//   - the replicas' reported totals (Σ enqueue_rate × window_s, Σ completion_rate × window_s) add up to
//     the database's totals. A SIGKILLed process cannot report what it did after its last tick, so the
//     database may hold a little more than was reported: the check requires 0 ≤ database − reported ≤
//     what the killed processes could have done between their last tick and the kill (stated per kill).
// Exit code 0 when every check holds. Creates and drops its own database (bench/database.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { AwaClient } from '../../src/index.js';
import { parseBenchArgs } from '../args.js';
import { createDatabase, dropAllCreated } from '../database.js';
import { sleep } from '../pace.js';
import { waitFor } from '../processes/worker-processes.js';

const ADAPTER = fileURLToPath(new URL('../portable-adapter.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const QUEUE = 'portable';
const WORKERS = 32;
const BATCH_MAX = 128;
const SAMPLE_EVERY_S = 5;

const { values } = parseBenchArgs(process.argv.slice(2), {
  seconds: { type: 'number', description: 'length of the kill phase (default 120)' },
  'kill-every': { type: 'number', description: 'seconds between kills (default 20)' },
  rate: { type: 'number', description: 'jobs/s each replica produces (default 200)' },
  'work-ms': { type: 'number', description: 'JOB_WORK_MS, so kills leave attempts in flight (default 50)' },
  json: { type: 'boolean', description: 'print the result as JSON' },
});
const seconds = (values.seconds as number | undefined) ?? 120;
const killEvery = (values['kill-every'] as number | undefined) ?? 20;
const rate = (values.rate as number | undefined) ?? 200;
const workMs = (values['work-ms'] as number | undefined) ?? 50;

interface Line {
  kind?: string;
  metric?: string;
  value?: number;
  window_s?: number;
  instance_id?: number;
  event_tables?: string[];
}

/** One process of one replica slot, from spawn to exit. */
class Incarnation {
  readonly lines: Line[] = [];
  /** When the last complete tick (its completion_rate line) arrived. */
  lastTickAt = 0;
  killedAt: number | null = null;
  stderr = '';
  /** Attempts this process rescued (as maintenance leader) from dead processes, per its log. */
  rescued = 0;
  exit: { code: number | null; signal: string | null; at: number } | null = null;
  readonly exited: Promise<void>;
  private tickWaiters: (() => void)[] = [];

  constructor(
    readonly instanceId: number,
    readonly proc: ChildProcess,
  ) {
    createInterface({ input: proc.stderr! }).on('line', (text) => {
      this.stderr = `${this.stderr}${text}\n`.slice(-20_000);
      const rescue = /rescued (\d+) attempt/.exec(text);
      if (rescue) this.rescued += Number(rescue[1]);
    });
    proc.stdout!.on('error', () => {});
    createInterface({ input: proc.stdout! }).on('line', (text) => {
      const line = JSON.parse(text) as Line;
      this.lines.push(line);
      if (line.metric === 'completion_rate') {
        this.lastTickAt = Date.now();
        for (const w of this.tickWaiters.splice(0)) w();
      }
    });
    this.exited = new Promise((resolve) =>
      proc.on('exit', (code, signal) => {
        this.exit = { code, signal, at: Date.now() };
        resolve();
      }),
    );
  }

  descriptor(): Line | undefined {
    return this.lines.find((l) => l.kind === 'descriptor');
  }

  /** Σ value × window_s of a rate metric: the jobs this process reported. */
  total(metric: string): number {
    return this.lines
      .filter((l) => l.metric === metric)
      .reduce((n, l) => n + Math.round((l.value ?? 0) * (l.window_s ?? 0)), 0);
  }

  nextTick(): Promise<void> {
    return new Promise((resolve) => this.tickWaiters.push(resolve));
  }
}

function start(url: string, instanceId: number, env: Record<string, string>): Incarnation {
  const proc = spawn(process.execPath, ['--import', 'tsx', ADAPTER], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      DATABASE_URL: url,
      BENCH_INSTANCE_ID: String(instanceId),
      WORKER_COUNT: String(WORKERS),
      JOB_WORK_MS: String(workMs),
      PRODUCER_BATCH_MAX: String(BATCH_MAX),
      SAMPLE_EVERY_S: String(SAMPLE_EVERY_S),
      // Keep completed jobs readable, so the database can count them at the end.
      AWA_COMPLETED_RETENTION_MS: '3600000',
      ...env,
    },
  });
  return new Incarnation(instanceId, proc);
}

async function started(inc: Incarnation): Promise<Incarnation> {
  await waitFor(
    `replica ${inc.instanceId} to describe itself`,
    () => {
      if (inc.exit) throw new Error(`replica ${inc.instanceId} exited during start-up: ${inc.stderr}`);
      return inc.descriptor() !== undefined;
    },
    60_000,
    50,
  );
  return inc;
}

const hasStackTrace = (stderr: string) => /\n\s+at /.test(stderr) || /^\w*Error\b/m.test(stderr);

async function main(): Promise<boolean> {
  const db = await createDatabase('replica_check');
  const dir = mkdtempSync(join(tmpdir(), 'awa-replica-check-'));
  const rateFile = join(dir, 'rate');
  const all: Incarnation[] = [];
  const failures: string[] = [];
  const check = (ok: boolean, what: string) => {
    if (!ok) failures.push(what);
    return ok;
  };
  const client = new AwaClient({ connectionString: db.url, poolSize: 2 });
  try {
    // 1. EPIPE: the reader goes away; the adapter must notice at its next line and leave quietly.
    const epipe = await started(start(db.url, 9, { PRODUCER_RATE: '0', SAMPLE_EVERY_S: '1' }));
    epipe.proc.stdout!.destroy();
    await Promise.race([epipe.exited, sleep(10_000)]);
    const epipeOk = check(
      epipe.exit?.code === 0 && !hasStackTrace(epipe.stderr),
      `EPIPE: exit ${JSON.stringify(epipe.exit)}, stderr: ${epipe.stderr.slice(-600)}`,
    );
    if (!epipe.exit) epipe.proc.kill('SIGKILL');

    // 2. Two replicas, one killed and restarted every killEvery seconds.
    writeFileSync(rateFile, String(rate));
    const env = { PRODUCER_RATE: String(rate), PRODUCER_RATE_CONTROL_FILE: rateFile };
    const live = await Promise.all([0, 1].map((id) => started(start(db.url, id, env))));
    all.push(...live);
    const kills: { instanceId: number; gapMs: number }[] = [];
    const t0 = Date.now();
    for (let k = 0; Date.now() - t0 + killEvery * 1000 <= seconds * 1000; k++) {
      await sleep(Math.max(0, t0 + (k + 1) * killEvery * 1000 - Date.now()));
      const id = k % 2;
      const victim = live[id]!;
      // Right after a tick, so little happens between the last report and the kill.
      await Promise.race([victim.nextTick(), sleep(SAMPLE_EVERY_S * 1000 + 2_000)]);
      victim.killedAt = Date.now();
      victim.proc.kill('SIGKILL');
      await victim.exited;
      kills.push({ instanceId: id, gapMs: victim.killedAt - victim.lastTickAt });
      const next = await started(start(db.url, id, env));
      live[id] = next;
      all.push(next);
    }
    await sleep(Math.max(0, t0 + seconds * 1000 - Date.now()));

    // 3. Stop producing, let the queue drain (killed attempts are rescued once their heartbeat is stale),
    // then stop both replicas.
    writeFileSync(rateFile, '0');
    await sleep(2_000);
    const open = async () => {
      const q = (await client.counts()).find((c) => c.queue === QUEUE);
      return q ? q.available + q.running + q.scheduled + q.retryable : 0;
    };
    const drainStart = Date.now();
    await waitFor('the queue to drain', async () => (await open()) === 0, 180_000, 500).catch((err) =>
      check(false, String(err)),
    );
    const drainMs = Date.now() - drainStart;
    const stops = await Promise.all(
      live.map(async (inc) => {
        const at = Date.now();
        inc.proc.kill('SIGTERM');
        await Promise.race([inc.exited, sleep(10_000)]);
        return {
          instanceId: inc.instanceId,
          code: inc.exit?.code ?? null,
          ms: (inc.exit?.at ?? Date.now()) - at,
        };
      }),
    );
    for (const s of stops)
      check(
        s.code === 0 && s.ms <= 5_000,
        `SIGTERM: replica ${s.instanceId} exit ${s.code} after ${s.ms} ms`,
      );

    // The database's view.
    const q = (await client.counts()).find((c) => c.queue === QUEUE);
    const dbCounts = q ?? {
      available: 0,
      running: 0,
      scheduled: 0,
      retryable: 0,
      completed: 0,
      failed: 0,
      cancelled: 0,
    };
    const dbTotal =
      dbCounts.available +
      dbCounts.running +
      dbCounts.scheduled +
      dbCounts.retryable +
      dbCounts.completed +
      dbCounts.failed +
      dbCounts.cancelled;
    check(
      dbCounts.completed === dbTotal && dbTotal > 0,
      `stuck or lost jobs: ${JSON.stringify(dbCounts)} of ${dbTotal}`,
    );

    // The kills left attempts in flight, and the leader rescued them (else the check proves little).
    const rescued = all.reduce((n, i) => n + i.rescued, 0);
    check(kills.length === 0 || rescued > 0, `no attempt was rescued after ${kills.length} kills`);

    // Instance ids and descriptors.
    for (const inc of all) {
      const wrong = inc.lines.filter((l) => l.instance_id !== inc.instanceId).length;
      check(
        wrong === 0,
        `replica ${inc.instanceId} (pid ${inc.proc.pid}): ${wrong} lines with another instance_id`,
      );
      const tables = inc.descriptor()?.event_tables ?? [];
      const bare = tables.filter((t) => !/^awa\.\w+$/.test(t));
      check(tables.length > 0 && bare.length === 0, `event_tables not schema-qualified: ${bare.join(', ')}`);
      const { rows } = await client.pool.query<{ missing: string[] }>(
        `select coalesce(array_agg(t) filter (where to_regclass(t) is null), '{}') as missing from unnest($1::text[]) t`,
        [tables],
      );
      check(rows[0]!.missing.length === 0, `event_tables that do not exist: ${rows[0]!.missing.join(', ')}`);
    }
    const depthFrom = new Set(
      all.filter((i) => i.lines.some((l) => l.metric === 'queue_depth')).map((i) => i.instanceId),
    );
    check(
      depthFrom.size === 1 && depthFrom.has(0),
      `queue_depth reported by instances ${[...depthFrom].join(', ')}`,
    );

    // Reported totals against the database's.
    const perReplica = [0, 1].map((id) => {
      const incs = all.filter((i) => i.instanceId === id);
      return {
        instanceId: id,
        processes: incs.length,
        enqueued: incs.reduce((n, i) => n + i.total('enqueue_rate'), 0),
        completed: incs.reduce((n, i) => n + i.total('completion_rate'), 0),
      };
    });
    const reportedEnqueued = perReplica.reduce((n, r) => n + r.enqueued, 0);
    const reportedCompleted = perReplica.reduce((n, r) => n + r.completed, 0);
    // What a killed process may have done unreported: its producer's rate over the gap since its last
    // tick plus one batch in flight; its host's completions over the gap (both replicas' worth of work at
    // most) plus one settle flush in flight (at most its concurrency).
    const slackS = 0.1;
    const enqueueBound = kills.reduce(
      (n, k) => n + Math.ceil(rate * (k.gapMs / 1000 + slackS)) + BATCH_MAX,
      0,
    );
    const completeBound = kills.reduce(
      (n, k) => n + Math.ceil(2 * rate * (k.gapMs / 1000 + slackS)) + WORKERS,
      0,
    );
    const unreportedEnqueued = dbTotal - reportedEnqueued;
    const unreportedCompleted = dbCounts.completed - reportedCompleted;
    check(
      unreportedEnqueued >= 0 && unreportedEnqueued <= enqueueBound,
      `enqueued: database ${dbTotal}, reported ${reportedEnqueued} (bound on the unreported: ${enqueueBound})`,
    );
    check(
      unreportedCompleted >= 0 && unreportedCompleted <= completeBound,
      `completed: database ${dbCounts.completed}, reported ${reportedCompleted} (bound on the unreported: ${completeBound})`,
    );

    const result = {
      ok: failures.length === 0,
      failures,
      settings: {
        seconds,
        killEvery,
        ratePerReplica: rate,
        workers: WORKERS,
        workMs,
        sampleEveryS: SAMPLE_EVERY_S,
      },
      epipe: { ok: epipeOk, exit: epipe.exit?.code ?? null },
      kills,
      rescued,
      drainMs,
      stops,
      database: { ...dbCounts, total: dbTotal },
      perReplica,
      reported: { enqueued: reportedEnqueued, completed: reportedCompleted },
      unreported: { enqueued: unreportedEnqueued, completed: unreportedCompleted },
      bounds: { enqueued: enqueueBound, completed: completeBound },
    };
    if (values.json) console.log(JSON.stringify(result, null, 2));
    else {
      const line = (s: string) => console.log(s);
      line(`replica check: ${result.ok ? 'PASS' : 'FAIL'}`);
      line(`  EPIPE on stdout: exit ${result.epipe.exit}, ${epipeOk ? 'quiet' : 'NOT quiet'}`);
      line(`  settings: ${JSON.stringify(result.settings)}`);
      line(`  rescued attempts (leader's log): ${rescued}`);
      line(`  kills: ${kills.map((k) => `#${k.instanceId} ${k.gapMs} ms after its tick`).join(', ')}`);
      line(
        `  drain after producers stopped: ${drainMs} ms; SIGTERM exits: ${stops.map((s) => `#${s.instanceId} ${s.code} in ${s.ms} ms`).join(', ')}`,
      );
      line(`  database: ${JSON.stringify(result.database)}`);
      for (const r of perReplica)
        line(
          `  replica ${r.instanceId} (${r.processes} processes): enqueued ${r.enqueued}, completed ${r.completed}`,
        );
      line(
        `  reported ${reportedEnqueued} enqueued / ${reportedCompleted} completed; database ${dbTotal} / ${dbCounts.completed}; ` +
          `unreported by killed processes ${unreportedEnqueued} / ${unreportedCompleted} (bounds ${enqueueBound} / ${completeBound})`,
      );
      for (const f of failures) line(`  FAILED: ${f}`);
    }
    return result.ok;
  } finally {
    for (const inc of all) if (!inc.exit) inc.proc.kill('SIGKILL');
    await Promise.all(all.map((i) => i.exited));
    await client.close();
    await dropAllCreated();
    rmSync(dir, { recursive: true, force: true });
  }
}

process.on('SIGINT', () => void dropAllCreated().finally(() => process.exit(130)));
main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
