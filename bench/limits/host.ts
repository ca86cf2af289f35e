// A worker host process for the flow-control fleet runs (bench/scenarios/limits.ts, test/chaos/flow-control-fleet.test.ts):
//
//   node --import tsx bench/limits/host.ts '<json LimitedHostConfig>'   (bench/limits/host.js once built)
//
// One WorkerHost serving the queues the config names (their limits declared there), every handler sleeping
// sleepMs. It appends JSON lines to its own log with appendFileSync: 'ready', the handler's starts (for the
// handler-clock view of a rate, which the tests only print), the jobs it handed back unstarted, the leader's
// rescues, errors. SIGTERM stops the host gracefully and exits 0; the tests SIGKILL it mid-run.
import { appendFileSync } from 'node:fs';
import { WorkerHost, type Job } from '../../src/index.js';
import { LIMITED_KINDS, type LimitedArgs, type LimitedHostConfig, type LimitedLine } from './jobs.js';

type Start = Extract<LimitedLine, { event: 'starts' }>['starts'][number];

/** The chaos suite's timings (harness.ts): a host silent for 1.5 s is dead, and the leader looks every 200 ms. */
const SHORT = {
  heartbeatIntervalMs: 200,
  heartbeatStalenessMs: 1_500,
  rescueIntervalMs: 200,
  leaderElectionIntervalMs: 200,
  promoteIntervalMs: 50,
  pollIntervalMs: 50,
};

async function main(): Promise<void> {
  const cfg = JSON.parse(process.argv[2] ?? '') as LimitedHostConfig;
  const write = (line: Record<string, unknown>) =>
    appendFileSync(cfg.log, `${JSON.stringify({ ...line, pid: process.pid, t: Date.now() })}\n`);
  const host = new WorkerHost({
    connectionString: cfg.url,
    ...(cfg.schema === undefined ? {} : { schema: cfg.schema }),
    instanceId: cfg.instanceId,
    queues: cfg.queues,
    ...(cfg.short ? SHORT : {}),
    ...(cfg.ringIntervalMs === undefined ? {} : { ringIntervalMs: cfg.ringIntervalMs }),
    ...(cfg.ringSlotMinRows === undefined ? {} : { ringSlotMinRows: cfg.ringSlotMinRows }),
    // The runs read completed jobs (state, attempt, rescue errors) after they end.
    completedRetentionMs: 3_600_000,
    shutdownTimeoutMs: 2_000,
  });

  let pending: Start[] = [];
  const flush = () => {
    if (pending.length === 0) return;
    write({ event: 'starts', starts: pending });
    pending = [];
  };
  if (cfg.startLog === 'buffered') setInterval(flush, 200).unref();
  const handler = async (job: Job<LimitedArgs>) => {
    if (cfg.startLog !== 'none') {
      pending.push([job.id, job.attempt, job.args.tenant, job.queue, Date.now()]);
      if (cfg.startLog === 'sync') flush();
    }
    const ms = job.args.sleepMs ?? cfg.sleepMs;
    if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms));
  };
  for (const queue of Object.keys(cfg.queues) as (keyof typeof LIMITED_KINDS)[])
    host.register(LIMITED_KINDS[queue], handler);

  host.on('rescue', (rescued) =>
    write({
      event: 'rescue',
      rescued: rescued.map((r) => ({ jobId: r.jobId, runLease: r.runLease, instanceId: r.instanceId })),
    }),
  );
  // Only this host's handler-less snoozes are hand-backs: the handlers here never snooze.
  host.on('settled', (s, accepted) => {
    if (accepted && s.outcome === 'snooze') write({ event: 'handback', jobIds: [s.jobId] });
  });
  host.on('prune', (r) => {
    if (r.outcome === 'pruned' || r.outcome === 'carried')
      write({ event: 'prune', slot: r.slot, outcome: r.outcome, carried: r.carried });
  });
  host.on('error', (err) =>
    write({ event: 'error', message: err instanceof Error ? err.message : String(err) }),
  );

  let stopping = false;
  process.on('SIGTERM', () => {
    if (stopping) return;
    stopping = true;
    void host.stop().then(
      () => {
        flush();
        write({ event: 'stopped' });
        process.exit(0);
      },
      (err: unknown) => {
        write({ event: 'error', message: `stop failed: ${String(err)}` });
        process.exit(1);
      },
    );
  });
  await host.start();
  write({ event: 'ready', instance: cfg.instanceId });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
