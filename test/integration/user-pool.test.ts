import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, WorkerHost, defineJob } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { until } from '../helpers/wait.js';

// A host running on a connection pool the user passed in (issue 8, item 4): its dedicated connections
// (LISTEN, leader) are borrowed from that pool, and one that is lost must go back to it as broken. Ten rounds
// of pg_terminate_backend of every backend of a small pool: the host still drains, and the pool ends with
// nothing checked out.

const POOL_MAX = 6;
const ROUNDS = 10;

describe('WorkerHost({ pool })', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let admin: pg.Pool;
  beforeAll(async () => {
    db = await createTestDatabase('user_pool');
    client = new AwaClient({ connectionString: db.url, poolSize: 2 });
    await client.migrate();
    admin = new pg.Pool({ connectionString: db.url, max: 2, application_name: 'user-pool-test' });
    admin.on('error', () => {});
  });
  afterAll(async () => {
    await client?.close();
    await admin?.end();
    await db?.drop();
  });

  it(`survives ${ROUNDS} rounds of pg_terminate_backend of all its backends, drains, and leaks no pool client`, async () => {
    const userPool = new pg.Pool({ connectionString: db.url, max: POOL_MAX, application_name: 'user-pool' });
    userPool.on('error', () => {});
    const kind = defineJob<{ n: number }>({ kind: 'up_job', queue: 'user_pool' });
    const host = new WorkerHost({
      pool: userPool,
      queues: { user_pool: 4 },
      pollIntervalMs: 50,
      promoteIntervalMs: 50,
      leaderElectionIntervalMs: 50,
      heartbeatIntervalMs: 200,
      shutdownTimeoutMs: 3_000,
    });
    host.on('error', () => {});
    host.register(kind, () => {});
    try {
      await host.start();
      await until('the host to lead', async () => (await leaderLockHolders(admin)).length === 1);
      let n = 0;
      for (let round = 1; round <= ROUNDS; round++) {
        const { rows } = await admin.query<{ pid: number; ok: boolean }>(
          `select pid, pg_terminate_backend(pid) as ok from pg_stat_activity
            where datname = current_database() and application_name = 'user-pool'`,
        );
        expect(rows.length, `round ${round}`).toBeGreaterThan(0);
        expect(
          rows.every((r) => r.ok),
          `round ${round}`,
        ).toBe(true);
        // Jobs enqueued right after the damage all run.
        const ids = (
          await client.enqueueMany(Array.from({ length: 20 }, () => ({ kind, args: { n: n++ } })))
        ).map((r) => r.id);
        await until(
          `round ${round}'s jobs to complete`,
          async () =>
            (await Promise.all(ids.map(async (id) => (await client.getJob(id))?.state))).every(
              (s) => s === 'completed',
            ),
          20_000,
        );
        // The pool never holds more than its size (a leak would pin slots until claims wait forever).
        expect(userPool.totalCount, `round ${round}`).toBeLessThanOrEqual(POOL_MAX);
      }
      // Leadership and LISTEN were re-established through the same pool.
      await until('a leader again', async () => (await leaderLockHolders(admin)).length === 1);
      expect((await leaderLockHolders(admin))[0]!.applicationName).toBe('user-pool');
    } finally {
      await host.stop();
    }
    // Everything the host borrowed came back: nothing is checked out, nobody waits.
    expect(userPool.waitingCount).toBe(0);
    expect(userPool.idleCount).toBe(userPool.totalCount);
    await userPool.end();
  }, 90_000);
});
