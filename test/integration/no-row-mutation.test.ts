import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, defineJob, WorkerHost } from '../../src/index.js';
import { createTestDatabase } from '../helpers/database.js';
import { readTableStats, sumOf, waitForSessionsToEnd, type TableStats } from '../helpers/table-stats.js';

// The design's central promise: draining jobs updates and deletes no row. A backend's table statistics
// are only certain to be counted once it has exited, so every connection that did the work is closed,
// and its session seen gone, before the statistics are read.

const job = defineJob({ kind: 'noop', queue: 'q' });
const N = 20_000;
const HEARTBEAT_MS = 200;
const READY = /^ready_entries_\d+$/;
const RECEIPTS = /^claim_batches_\d+$/;
const CLOSURES = /^closure_batches_\d+$/;

describe('claim/complete loop', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    db = await createTestDatabase('nomut');
  });
  afterAll(async () => {
    await db.drop();
  });

  it(`drains ${N} jobs with zero row UPDATEs or DELETEs, writing per batch, not per job`, async () => {
    const producer = new AwaClient({ connectionString: db.url });
    await producer.migrate();
    await producer.copyEnqueue(Array.from({ length: N }, (_, n) => ({ kind: job, args: { n } })));
    await producer.close();
    await waitForSessionsToEnd(db.url);
    const before = await readTableStats(db.url);
    // Every enqueue insert is counted: the statistics are complete, not merely flushed so far.
    expect(sumOf(before, READY, 'ins')).toBe(N);

    const host = new WorkerHost({
      connectionString: db.url,
      queues: { q: 200 },
      maintenance: false,
      heartbeatIntervalMs: HEARTBEAT_MS,
    });
    host.register(job, () => {});
    const started = performance.now();
    await host.start();
    while (host.stats.completed < N) await new Promise((r) => setTimeout(r, 20));
    await host.stop();
    const drainMs = performance.now() - started;
    // stop() ended the host's pool and its LISTEN connection; once their sessions are gone, every row
    // they wrote is in the statistics.
    await waitForSessionsToEnd(db.url);
    const after = await readTableStats(db.url);

    const delta = (name: string, k: keyof Omit<TableStats, 'relname'>) =>
      (after.get(name)?.[k] ?? 0) - (before.get(name)?.[k] ?? 0);
    const familyDelta = (family: RegExp, k: 'ins' | 'upd' | 'del') =>
      sumOf(after, family, k) - sumOf(before, family, k);
    // The one row a host updates is its own liveness row: once per heartbeat interval and at stop,
    // whatever the number of jobs. No queue table is updated or deleted from.
    const mutated = [...after.keys()].filter((t) => delta(t, 'upd') !== 0 || delta(t, 'del') !== 0);
    expect(mutated.filter((t) => t !== 'runtime_instances')).toEqual([]);
    expect(delta('runtime_instances', 'ins')).toBe(1);
    // At least the stop mark (stopped_at) is counted: the host's own writes reached the statistics.
    expect(delta('runtime_instances', 'upd')).toBeGreaterThanOrEqual(1);
    expect(delta('runtime_instances', 'upd')).toBeLessThanOrEqual(Math.ceil(drainMs / HEARTBEAT_MS) + 2);
    expect(delta('runtime_instances', 'del')).toBe(0);
    // No job was re-inserted (no retry, no snooze): draining added no ready rows.
    expect(familyDelta(READY, 'ins')).toBe(0);
    // Receipts and closures are written per batch: far fewer rows than jobs.
    const receipts = familyDelta(RECEIPTS, 'ins');
    const closures = familyDelta(CLOSURES, 'ins');
    expect(receipts).toBeGreaterThan(0);
    expect(receipts).toBeLessThan(N / 10);
    expect(closures).toBeGreaterThan(0);
    expect(closures).toBeLessThan(N / 10);
    expect(host.stats.completed).toBe(N);

    // And the database agrees that every job completed, none left waiting or running.
    const reader = new AwaClient({ connectionString: db.url, poolSize: 1 });
    try {
      expect(await reader.counts()).toEqual([
        {
          queue: 'q',
          paused: false,
          available: 0,
          running: 0,
          waiting: 0,
          scheduled: 0,
          retryable: 0,
          completed: N,
          failed: 0,
          cancelled: 0,
          dlq: 0,
          blocked: 0,
        },
      ]);
    } finally {
      await reader.close();
    }
  });
});
