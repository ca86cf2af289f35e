// Recovery timings at the DEFAULT settings (heartbeatIntervalMs 5 s, heartbeatStalenessMs 30 s,
// rescueIntervalMs 5 s, leaderElectionIntervalMs 2 s):
//
//   npx tsx bench/recovery-times.ts [--trials 3] [--json]
//
// Each trial runs worker processes (bench/processes/worker-process.ts, host defaults) on a fresh database:
// the maintenance leader and one other worker take six long jobs, a third (the survivor) starts with free
// permits, then the first two are SIGKILLed at once, and it measures from the survivor's event lines:
//   failover  SIGKILL → the survivor's 'leadership' event
//   rescue    SIGKILL → the survivor's 'rescue' event naming the killed worker's attempts
//   rerun     SIGKILL → the first re-run (attempt 2) of one of those jobs starting on the survivor
// Prints each trial and the median. Uses DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432)
// and creates and drops its own databases (bench/database.ts).
import { AwaClient, defineJob } from '../src/index.js';
import { createDatabase, dropDatabase } from './database.js';
import { waitFor, WorkerProcess } from './processes/worker-processes.js';

const args = process.argv.slice(2);
const trials = Number(args[args.indexOf('--trials') + 1] ?? 3) || 3;
const asJson = args.includes('--json');

const QUEUE = 'recovery';
const KIND = 'recovery_sleep';
const sleepJob = defineJob<{ n: number }>({ kind: KIND, queue: QUEUE });

interface Trial {
  failoverMs: number;
  rescueMs: number;
  rerunMs: number;
  rescued: number;
}

async function trial(n: number): Promise<Trial> {
  const db = await createDatabase('recovery');
  const client = new AwaClient({ connectionString: db.url, poolSize: 2 });
  const workers: WorkerProcess[] = [];
  try {
    await client.migrate();
    const spawn = (id: string) =>
      WorkerProcess.spawn({
        url: db.url,
        instanceId: `bench-${n}-${id}`,
        queue: QUEUE,
        kind: KIND,
        concurrency: 4,
        sleepMs: 300_000,
        logAttempts: true,
      });
    // Two workers take all the jobs; the survivor starts afterwards, so it has free permits for re-runs.
    workers.push(...(await Promise.all(['a', 'b'].map(spawn))));
    await waitFor('a leader', () => workers.some((w) => w.isLeader()), 30_000);
    const leader = workers.find((w) => w.isLeader())!;
    const victim = workers.find((w) => w !== leader)!;
    await client.enqueueMany(Array.from({ length: 6 }, (_, i) => ({ kind: sleepJob, args: { n: i } })));
    await waitFor(
      'both workers to run jobs',
      () =>
        leader.running().length > 0 &&
        victim.running().length > 0 &&
        leader.running().length + victim.running().length === 6,
      30_000,
    );
    const survivor = await spawn('c');
    workers.push(survivor);
    const victimJobs = new Set(victim.running().map((key) => key.split(':')[0]));
    const killedAt = Date.now();
    await Promise.all([leader.kill(), victim.kill()]);

    let failoverMs = -1;
    let rescueMs = -1;
    let rerunMs = -1;
    let rescued = 0;
    await waitFor(
      'failover, rescue and re-run',
      () => {
        for (const l of survivor.lines) {
          if (l.t < killedAt) continue;
          if (l.event === 'leadership' && l.isLeader && failoverMs < 0) failoverMs = l.t - killedAt;
          if (
            l.event === 'rescue' &&
            rescueMs < 0 &&
            l.rescued.some((r) => r.instanceId === victim.cfg.instanceId)
          ) {
            rescueMs = l.t - killedAt;
            rescued = l.rescued.length;
          }
          if (l.event === 'start' && rerunMs < 0 && victimJobs.has(l.id) && l.attempt === 2)
            rerunMs = l.t - killedAt;
        }
        return failoverMs >= 0 && rescueMs >= 0 && rerunMs >= 0;
      },
      120_000,
      50,
    );
    return { failoverMs, rescueMs, rerunMs, rescued };
  } finally {
    await Promise.all(workers.map((w) => w.kill()));
    await client.close();
    await dropDatabase(db.name);
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const results: Trial[] = [];
for (let i = 0; i < trials; i++) {
  const t = await trial(i);
  results.push(t);
  if (!asJson)
    console.log(
      `trial ${i + 1}/${trials}: failover ${t.failoverMs} ms, rescue ${t.rescueMs} ms (${t.rescued} attempts), re-run ${t.rerunMs} ms`,
    );
}
const summary = {
  settings: {
    heartbeatIntervalMs: 5_000,
    heartbeatStalenessMs: 30_000,
    rescueIntervalMs: 5_000,
    leaderElectionIntervalMs: 2_000,
  },
  trials: results,
  median: {
    failoverMs: median(results.map((r) => r.failoverMs)),
    rescueMs: median(results.map((r) => r.rescueMs)),
    rerunMs: median(results.map((r) => r.rerunMs)),
  },
};
if (asJson) console.log(JSON.stringify(summary, null, 2));
else
  console.log(
    `median of ${trials}: failover ${summary.median.failoverMs} ms, SIGKILL → rescued ${summary.median.rescueMs} ms, SIGKILL → re-run started ${summary.median.rerunMs} ms`,
  );
