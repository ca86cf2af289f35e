import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, type QueueCounts } from '../../src/index.js';
import { TWO_PROC_QUEUE, twoProcJob } from '../fixtures/two-process-jobs.js';
import { createTestDatabase } from '../helpers/database.js';

// Two real worker processes drain one queue concurrently. Every attempt carries a fencing token
// (run_lease); the two processes must never run the same attempt, and nothing may be lost.

const JOBS = 4_000;
const RETRY_EVERY = 10; // every 10th job throws RetryAfter once → a second attempt, a new run_lease
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const FIXTURE = fileURLToPath(new URL('../fixtures/worker-process.ts', import.meta.url));

interface Line {
  event: 'ready' | 'attempt' | 'stopped';
  pid: number;
  id?: string;
  attempt?: number;
  runLease?: number;
}

interface Worker {
  child: ChildProcess;
  lines: Line[];
  stderr: string[];
  ready: Promise<void>;
  exited: Promise<number | null>;
}

function startWorker(url: string): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, url], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Line[] = [];
  const stderr: string[] = [];
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  createInterface({ input: child.stdout! }).on('line', (text) => {
    const line = JSON.parse(text) as Line;
    lines.push(line);
    if (line.event === 'ready') markReady();
  });
  createInterface({ input: child.stderr! }).on('line', (text) => stderr.push(text));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, lines, stderr, ready, exited };
}

describe('two worker processes', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let client: AwaClient;
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('two_processes');
    client = new AwaClient({ connectionString: db.url });
    await client.migrate();
  });

  afterAll(async () => {
    for (const w of workers) if (w.child.exitCode === null) w.child.kill('SIGKILL');
    await client?.close();
    await db?.drop();
  });

  it('never run the same attempt twice, and together finish every job', async () => {
    workers.push(startWorker(db.url), startWorker(db.url));
    const failedEarly = Promise.race(
      workers.map((w) =>
        w.exited.then((code) => {
          throw new Error(`worker exited early with ${code}: ${w.stderr.join('\n')}`);
        }),
      ),
    );
    await Promise.race([Promise.all(workers.map((w) => w.ready)), failedEarly]);

    // Enqueue only once both are listening, so both get a share from the first notification on.
    const enqueued = await client.copyEnqueue(
      Array.from({ length: JOBS }, (_, n) => ({
        kind: twoProcJob,
        args: { n, retryOnce: n % RETRY_EVERY === 0 },
      })),
    );
    expect(enqueued).toEqual({ inserted: JOBS, duplicates: 0 });

    const counts = async (): Promise<QueueCounts | undefined> =>
      (await client.counts()).find((c) => c.queue === TWO_PROC_QUEUE);
    const until = Date.now() + 45_000;
    for (;;) {
      const c = await counts();
      if (c && c.completed === JOBS) break;
      if (Date.now() > until) throw new Error(`not drained: ${JSON.stringify(c)}`);
      await Promise.race([new Promise((r) => setTimeout(r, 50)), failedEarly]);
    }

    for (const w of workers) w.child.kill('SIGTERM');
    expect(await Promise.all(workers.map((w) => w.exited))).toEqual([0, 0]);
    for (const w of workers) expect(w.lines.at(-1)?.event).toBe('stopped');

    const attempts = workers.flatMap((w) => w.lines.filter((l) => l.event === 'attempt'));
    // Every (id, runLease) attempt ran exactly once across both processes.
    const perAttempt = new Map<string, number>();
    for (const a of attempts) {
      const key = `${a.id}:${a.runLease}`;
      perAttempt.set(key, (perAttempt.get(key) ?? 0) + 1);
    }
    const duplicated = [...perAttempt].filter(([, n]) => n > 1);
    expect(duplicated).toEqual([]);
    expect(attempts).toHaveLength(JOBS + JOBS / RETRY_EVERY);

    // Every job ran; the retried ones twice, with attempts 1 then 2 and distinct fencing tokens.
    const byJob = new Map<string, { attempt: number; runLease: number }[]>();
    for (const a of attempts) {
      const list = byJob.get(a.id!) ?? [];
      list.push({ attempt: a.attempt!, runLease: a.runLease! });
      byJob.set(a.id!, list);
    }
    expect(byJob.size).toBe(JOBS);
    const shapes = new Map<string, number>();
    for (const list of byJob.values()) {
      const shape = list
        .sort((x, y) => x.runLease - y.runLease)
        .map((x) => `${x.attempt}@${x.runLease}`)
        .join(',');
      shapes.set(shape, (shapes.get(shape) ?? 0) + 1);
    }
    expect(Object.fromEntries(shapes)).toEqual({
      '1@1': JOBS - JOBS / RETRY_EVERY,
      '1@1,2@2': JOBS / RETRY_EVERY,
    });

    // Both processes did work.
    for (const w of workers) {
      expect(w.lines.filter((l) => l.event === 'attempt').length).toBeGreaterThan(0);
      // A clean run reports no host errors.
      expect(w.stderr).toEqual([]);
    }

    expect(await counts()).toEqual({
      queue: TWO_PROC_QUEUE,
      paused: false,
      available: 0,
      running: 0,
      waiting: 0,
      scheduled: 0,
      retryable: 0,
      completed: JOBS,
      failed: 0,
      cancelled: 0,
      dlq: 0,
      blocked: 0,
    });
  }, 90_000);
});
