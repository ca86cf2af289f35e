// A handler that runs CPU-bound work inline stops the host's event loop, and with it the heartbeat that keeps
// the leader from taking the host for dead. The host cannot prevent that, but it must say so: an 'error' event
// (AWA_EVENT_LOOP_BLOCKED) naming how long the loop stood still and the kinds that run on its thread, and
// pointing at execution: "pool". A host whose loop never stands still that long says nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, EventLoopBlockedError, WorkerHost, defineJob } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

const HEARTBEAT_MS = 200;
/** What the host reports from: two heartbeat intervals, at least 1 s. */
const STALL_REPORTED_MS = 1_000;
const BUSY_MS = 1_500;

describe('a blocked event loop', () => {
  let db: TestDatabase;
  let client: AwaClient;
  beforeAll(async () => {
    db = await createTestDatabase('loop_blocked');
    client = new AwaClient({ connectionString: db.url, poolSize: 2 });
    await client.migrate();
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('is reported as AWA_EVENT_LOOP_BLOCKED with how long it stood still and the inline kinds; a quiet loop is not', async () => {
    const quiet = defineJob<{ n: number }>({ kind: 'loop_quiet', queue: 'loop' });
    const busy = defineJob<{ n: number }>({ kind: 'loop_busy_inline', queue: 'loop' });
    const host = new WorkerHost({
      connectionString: db.url,
      queues: { loop: 4 },
      heartbeatIntervalMs: HEARTBEAT_MS,
      heartbeatStalenessMs: 10_000,
      pollIntervalMs: 50,
      shutdownTimeoutMs: 3_000,
    });
    const errors: unknown[] = [];
    host.on('error', (err) => errors.push(err));
    const ran: string[] = [];
    let busyWallMs = 0;
    host.register(quiet, async () => {
      ran.push('quiet');
    });
    host.register(busy, () => {
      ran.push('busy');
      // CPU-bound work on the host's own thread, for BUSY_MS of CPU time: on a busy machine that takes longer
      // than BUSY_MS, and the stall with it.
      const started = performance.now();
      const cpu = process.cpuUsage();
      while (process.cpuUsage(cpu).user / 1_000 < BUSY_MS) {
        for (let i = 0; i < 10_000; i++);
      }
      busyWallMs = performance.now() - started;
    });
    const blocked = () =>
      errors.filter((e): e is EventLoopBlockedError => e instanceof EventLoopBlockedError);
    await host.start();
    try {
      await client.enqueueMany(Array.from({ length: 50 }, (_, n) => ({ kind: quiet, args: { n } })));
      await until('the quiet jobs to run', async () => ran.length === 50);
      // Longer than the reporting threshold: a quiet host reports nothing.
      await new Promise((r) => setTimeout(r, STALL_REPORTED_MS + 500));
      expect(blocked()).toEqual([]);

      await client.enqueue(busy, { n: 0 });
      const [report] = await until('the stall to be reported', async () => {
        const b = blocked();
        return b.length > 0 ? b : undefined;
      });
      expect(report!.code).toBe('AWA_EVENT_LOOP_BLOCKED');
      expect(report!.stalledMs).toBeGreaterThanOrEqual(STALL_REPORTED_MS);
      // The stall it names is the handler's: no longer than the handler ran (plus one check interval).
      expect(report!.stalledMs).toBeLessThanOrEqual(busyWallMs + 1_000);
      expect(report!.message).toContain('loop_busy_inline');
      expect(report!.message).toContain('execution: "pool"');
      // One stall, one report; the job itself ran once and was not taken for abandoned.
      await new Promise((r) => setTimeout(r, 500));
      expect(blocked()).toHaveLength(1);
      expect(ran.filter((k) => k === 'busy')).toEqual(['busy']);
    } finally {
      await host.stop();
    }
  });
});
