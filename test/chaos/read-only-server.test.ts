// Chaos: the host's connections drop and come back to a server that cannot take writes. That is what a
// failover looks like from a client whose address still leads to the old primary, now a standby, or to a
// replica (a proxy or DNS record behind the failover): every write fails with 25006 (read_only_sql_transaction)
// on connections that are otherwise healthy, and a session keeps the read-only state it started with. Here the
// database is made read-only for new sessions (default_transaction_read_only) and the host's backends are
// terminated, so it reconnects to "the standby". A host that kept those connections stayed stuck on them after
// the database was writable again: its claims, flushes, heartbeats and the leader's work failed for good. It
// must report AWA_DATABASE_READ_ONLY, give each such connection up, and finish every job once a new
// connection can write; none lost, none run twice. A producer's call fails the same way, with nothing written.
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, DatabaseReadOnlyError, WorkerHost, defineJob } from '../../src/index.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

const JOBS = 200;

describe('chaos: the server turns read-only under the host', () => {
  let db: TestDatabase;
  let admin: pg.Pool;
  let producer: AwaClient;
  beforeAll(async () => {
    ({ db, client: producer } = await migratedDatabase('read_only', { poolSize: 2 }));
    admin = sidePool(db.url, 1, 'read-only-test');
  });
  afterAll(async () => {
    await producer?.close();
    await admin?.end();
    await db?.drop();
  });

  const setReadOnly = (on: boolean) =>
    admin.query(
      `alter database ${pg.escapeIdentifier(db.name)} ${on ? 'set default_transaction_read_only = on' : 'reset default_transaction_read_only'}`,
    );

  it('reports AWA_DATABASE_READ_ONLY, gives the read-only connections up, and finishes every job once, when writes are possible again', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'read_only_job', queue: 'read_only' });
    const runs = new Map<number, number>();
    const errors: unknown[] = [];
    const host = new WorkerHost({
      connectionString: db.url,
      queues: { read_only: 4 },
      pollIntervalMs: 100,
      heartbeatIntervalMs: 300,
      leaderElectionIntervalMs: 100,
      promoteIntervalMs: 100,
      shutdownTimeoutMs: 3_000,
    });
    host.on('error', (err) => errors.push(err));
    host.register(kind, async (job) => {
      runs.set(job.args.n, (runs.get(job.args.n) ?? 0) + 1);
      await sleep(10);
    });
    await host.start();
    try {
      const ids = (
        await producer.enqueueMany(Array.from({ length: JOBS }, (_, n) => ({ kind, args: { n } })))
      ).map((r) => r.id);
      await until('a quarter of the jobs to run', async () => runs.size >= JOBS / 4, 10_000, 1);

      // The failover: the host's sessions end, and the server its new ones reach cannot write.
      await setReadOnly(true);
      const { rows } = await admin.query<{ n: number }>(
        `select count(*) filter (where pg_terminate_backend(pid))::int as n from pg_stat_activity
          where datname = current_database() and application_name in ('awa-worker', 'awa-listen', 'awa-leader')`,
      );
      expect(rows[0]!.n).toBeGreaterThanOrEqual(2);
      const readOnlyReports = () => errors.filter((e) => e instanceof DatabaseReadOnlyError);
      await until('the host to report the read-only server', async () => readOnlyReports().length >= 3);
      const report = readOnlyReports()[0] as DatabaseReadOnlyError;
      expect(report.code).toBe('AWA_DATABASE_READ_ONLY');
      expect(report.message).toContain('standby');

      // A producer whose connection reaches the read-only server gets the typed error, and nothing is written.
      const lateProducer = new AwaClient({ connectionString: db.url, poolSize: 1 });
      try {
        await expect(lateProducer.enqueue(kind, { n: JOBS })).rejects.toBeInstanceOf(DatabaseReadOnlyError);
        const ranBefore = runs.size;
        await sleep(1_000);
        // While no connection can write, no job starts that had not been claimed before.
        expect(runs.size).toBeLessThanOrEqual(ranBefore + 4);

        // Writable again, for new sessions only: the host's current ones stay read-only, so it must replace them.
        await setReadOnly(false);
        ids.push((await lateProducer.enqueue(kind, { n: JOBS })).id);
      } finally {
        await lateProducer.close();
      }
      await until('every job to run', async () => runs.size === JOBS + 1, 20_000);
      await until(
        'every job to be completed in the database',
        async () => {
          const states = await Promise.all(ids.map(async (id) => (await producer.getJob(id))?.state));
          return states.every((s) => s === 'completed');
        },
        10_000,
        200,
      );
      expect([...runs.values()].filter((n) => n !== 1)).toEqual([]);
      expect(runs.size).toBe(JOBS + 1);
    } finally {
      await setReadOnly(false);
      await host.stop();
    }
  });
});
