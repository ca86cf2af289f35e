// A benchmark worker process: one WorkerHost serving one queue with one kind whose handler sleeps
// `sleepMs` (0: a no-op). Started by bench/processes/worker-processes.ts as
//
//   node --import tsx bench/processes/worker-process.ts '<json WorkerProcessConfig>'
//
// and reports on stdout, one JSON object (a WorkerEvent) per line: ready, attempt starts and ends (if
// asked), leadership, rescues, progress (completed so far), errors, stopped. With `waitForGo` it loads
// first (modules imported, host built), says `ready`, and starts the host only when a `go` line arrives on
// stdin, so a timed run does not include process start-up. SIGTERM stops the host gracefully and exits 0.
import { createInterface } from 'node:readline';
import { defineJob, WorkerHost } from '../../src/index.js';
import { hostUsage, type WorkerEvent, type WorkerProcessConfig } from './protocol.js';

function write(event: WorkerEvent): void {
  process.stdout.write(`${JSON.stringify({ ...event, t: Date.now() })}\n`);
}

// The parent may stop reading (it has what it needed); that is no reason for a stack trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

async function main(): Promise<void> {
  const cfg = JSON.parse(process.argv[2] ?? '') as WorkerProcessConfig;
  const kind = defineJob<unknown>({ kind: cfg.kind, queue: cfg.queue, maxAttempts: 5 });
  const host = new WorkerHost({
    connectionString: cfg.url,
    ...(cfg.schema ? { schema: cfg.schema } : {}),
    ...(cfg.instanceId ? { instanceId: cfg.instanceId } : {}),
    queues: { [cfg.queue]: { concurrency: cfg.concurrency, prefetch: cfg.prefetch } },
    shutdownTimeoutMs: 2_000,
  });
  host.register(kind, async (job) => {
    if (cfg.logAttempts) write({ event: 'start', id: job.id, attempt: job.attempt });
    if (cfg.sleepMs > 0) await new Promise((resolve) => setTimeout(resolve, cfg.sleepMs));
    if (cfg.logAttempts) write({ event: 'end', id: job.id, attempt: job.attempt });
  });
  host.on('leadership', (isLeader) => write({ event: 'leadership', isLeader }));
  host.on('rescue', (rescued) =>
    write({ event: 'rescue', rescued: rescued.map((r) => ({ jobId: r.jobId, instanceId: r.instanceId })) }),
  );
  let lastError = 0;
  host.on('error', (err) => {
    if (Date.now() - lastError < 1_000) return;
    lastError = Date.now();
    write({ event: 'error', message: err instanceof Error ? err.message : String(err) });
  });

  let progress: NodeJS.Timeout | null = null;
  let cpuAtStart = process.cpuUsage();
  const usage = () => hostUsage(host.stats, cpuAtStart);
  const start = async () => {
    cpuAtStart = process.cpuUsage();
    await host.start();
    if (cfg.progressEveryMs)
      progress = setInterval(
        () => write({ event: 'progress', completed: host.stats.completed, usage: usage() }),
        cfg.progressEveryMs,
      );
  };

  let stopping = false;
  process.on('SIGTERM', () => {
    if (stopping) return;
    stopping = true;
    if (progress) clearInterval(progress);
    void host.stop().then(
      () => {
        write({ event: 'stopped', completed: host.stats.completed, usage: usage() });
        process.exit(0);
      },
      (err: unknown) => {
        write({ event: 'error', message: `stop failed: ${String(err)}` });
        process.exit(1);
      },
    );
  });

  if (cfg.waitForGo) {
    const lines = createInterface({ input: process.stdin });
    lines.on('line', (line) => {
      if (line.trim() !== 'go') return;
      lines.close();
      start().catch(fatal);
    });
    write({ event: 'ready' });
  } else {
    await start();
    write({ event: 'ready' });
  }
}

function fatal(err: unknown): never {
  console.error(err);
  process.exit(1);
}

main().catch(fatal);
