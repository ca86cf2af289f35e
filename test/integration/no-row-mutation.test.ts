import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, defineJob, WorkerHost } from '../../src/index.js';
import { createTestDatabase } from '../helpers/database.js';

// The design's central promise: draining jobs updates and deletes no row. Table statistics are flushed
// by a backend when it exits, so every connection that did the work is closed before reading them.

interface TableStats {
  relname: string;
  ins: number;
  upd: number;
  del: number;
}

async function tableStats(url: string): Promise<Map<string, TableStats>> {
  const c = new pg.Client(url);
  await c.connect();
  try {
    await c.query('select pg_stat_clear_snapshot()');
    const { rows } = await c.query<TableStats>(
      `select relname, n_tup_ins::int as ins, n_tup_upd::int as upd, n_tup_del::int as del
         from pg_stat_user_tables where schemaname = 'awa'`,
    );
    return new Map(rows.map((r) => [r.relname, r]));
  } finally {
    await c.end();
  }
}

const job = defineJob({ kind: 'noop', queue: 'q' });
const N = 20_000;
const HEARTBEAT_MS = 200;

describe('claim/complete loop', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    db = await createTestDatabase('nomut');
  });
  afterAll(async () => {
    await db.drop();
  });

  it(`drains ${N} jobs with zero row UPDATEs or DELETEs, writing per batch, not per job`, async () => {
    const client = new AwaClient({ connectionString: db.url });
    await client.migrate();
    await client.copyEnqueue(Array.from({ length: N }, (_, n) => ({ kind: job, args: { n } })));
    await client.close();
    const before = await waitForStats(db.url, (s) => (s.get('ready_entries_0')?.ins ?? 0) >= N);

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
    const after = await waitForStats(db.url, (s) => (s.get('closure_batches_0')?.ins ?? 0) > 0);

    const delta = (name: string, k: 'ins' | 'upd' | 'del') =>
      (after.get(name)?.[k] ?? 0) - (before.get(name)?.[k] ?? 0);
    // The one row a host updates is its own liveness row: once per heartbeat interval and at stop,
    // whatever the number of jobs. No queue table is updated or deleted from.
    const mutated = [...after.keys()].filter((t) => delta(t, 'upd') !== 0 || delta(t, 'del') !== 0);
    expect(mutated.filter((t) => t !== 'runtime_instances')).toEqual([]);
    const heartbeats = Math.ceil(drainMs / HEARTBEAT_MS) + 1;
    expect(delta('runtime_instances', 'upd')).toBeLessThanOrEqual(heartbeats + 1);
    expect(delta('runtime_instances', 'del')).toBe(0);
    // Receipts and closures are written per batch: far fewer rows than jobs.
    const receipts = delta('claim_batches_0', 'ins');
    const closures = delta('closure_batches_0', 'ins');
    expect(receipts).toBeGreaterThan(0);
    expect(receipts).toBeLessThan(N / 10);
    expect(closures).toBeLessThan(N / 10);
    expect(host.stats.completed).toBe(N);
  });
});

/** Stats of finished backends can take a moment to land; wait until the expected writes show. */
async function waitForStats(
  url: string,
  ready: (s: Map<string, TableStats>) => boolean,
): Promise<Map<string, TableStats>> {
  for (let i = 0; i < 100; i++) {
    const s = await tableStats(url);
    if (ready(s)) return s;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('table statistics never showed the expected writes');
}
