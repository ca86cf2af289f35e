// The long profile of the correctness checks (docs/correctness.md): for --minutes, alternates model-based runs
// (random command sequences against the engine and the reference model) with concurrent histories (terminated
// backends, a pinned snapshot, a silent claimer, and every fourth history a restart of a server of its own),
// each with a seed derived from --seed. Prints runs, operations and faults per second; stops at the first
// failure with its seed, and exits 1.
//
//   npm run check:model -- --minutes 30 --seed 7
import { parseArgs } from 'node:util';
import { EmbeddedPostgres } from '../src/embedded/launcher.js';
import { resolvePgServer } from '../test/helpers/pg-server.js';
import { createModelDatabase } from '../test/model/engine.js';
import { checkHistory } from '../test/model/history-check.js';
import { HistoryRun } from '../test/model/history.js';
import { runModel } from '../test/model/run-model.js';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    seed: { type: 'string', default: String(Date.now() % 1_000_000) },
    only: { type: 'string' },
  },
});
const minutes = Number(values.minutes);
const seed = Number(values.seed);
if (!(minutes > 0) || !Number.isInteger(seed)) {
  console.error('usage: npm run check:model -- --minutes N --seed S [--only model|history]');
  process.exit(2);
}

const started = Date.now();
const deadline = started + minutes * 60_000;
const totals = { modelRuns: 0, modelCommands: 0, histories: 0, historyOps: 0, faults: 0 };

function line(what: string): void {
  const s = (Date.now() - started) / 1000;
  const ops = totals.modelCommands + totals.historyOps;
  const runs = totals.modelRuns + totals.histories;
  console.log(
    `[check:model ${s.toFixed(0)}s] ${what} | runs ${runs} (${(runs / s).toFixed(2)}/s), operations ${ops} (${(ops / s).toFixed(1)}/s), faults ${totals.faults} (${(totals.faults / s).toFixed(2)}/s)`,
  );
}

async function modelBatch(url: string, s: number): Promise<void> {
  const stats = await runModel(url, { seed: s, numRuns: 40, maxCommands: 40, timeLimitMs: 60_000 });
  totals.modelRuns += stats.runs;
  totals.modelCommands += stats.commands;
  line(`model seed ${s}: ${stats.runs} runs, ${stats.commands} commands`);
}

async function history(url: string, s: number, restart?: () => Promise<void>): Promise<void> {
  const db = await createModelDatabase(url, 'soak_h');
  try {
    const queues = ['hq', 'hq_dlq'];
    const run = new HistoryRun(
      db.url,
      db.client,
      db.schema,
      {
        seed: s,
        produceMs: 15_000,
        producers: 4,
        claimers: 3,
        queues,
        terminateEveryMs: restart ? 1_000 : 300,
        pinSnapshot: s % 2 === 0,
        stallClaimer: true,
        stalenessSeconds: 2,
        ...(restart ? { restart } : {}),
      },
      `s${s}`,
    );
    await run.run();
    const report = await checkHistory(run.events, db.client, db.pool, db.schema, queues, `seed-${s}`);
    totals.histories++;
    totals.historyOps += run.counters.operations;
    totals.faults += run.counters.faults;
    line(
      `history seed ${s}${restart ? ' (restart)' : ''}: ${report.committed} committed, ${report.rolledBack} rolled back, ${run.counters.operations} operations, ${run.counters.faults} faults`,
    );
    if (report.violations.length > 0) {
      console.error(report.violations.slice(0, 30).join('\n'));
      throw new Error(`history seed ${s}: ${report.violations.length} violations; history in ${report.file}`);
    }
  } finally {
    await db.drop();
  }
}

const server = await resolvePgServer();
let own: EmbeddedPostgres | null = null;
console.log(`[check:model] seed ${seed}, ${minutes} min, PostgreSQL: ${server.source}`);
try {
  for (let i = 0; Date.now() < deadline; i++) {
    const s = seed + i;
    if (values.only !== 'history') await modelBatch(server.url, s);
    if (Date.now() >= deadline || values.only === 'model') continue;
    if (i % 4 === 3) {
      own ??= await EmbeddedPostgres.start();
      const srv = own;
      await history(srv.url, s, () => srv.restart());
    } else await history(server.url, s);
  }
  line('done');
} catch (err) {
  line(`FAILED after ${((Date.now() - started) / 1000).toFixed(0)}s`);
  console.error((err as Error).message);
  process.exitCode = 1;
} finally {
  await own?.destroy();
  await server.stop();
}
