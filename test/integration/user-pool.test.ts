import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import { WorkerHost, defineJob } from '../../src/index.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { until } from '../helpers/wait.js';

// A host running on a connection pool the user passed in (issue 8, item 4): its dedicated connections
// (LISTEN, leader) are borrowed from that pool, and one that is lost must go back to it as broken. Ten rounds
// of pg_terminate_backend of every backend of a small pool: the host still drains, and the pool ends with
// nothing checked out.

const POOL_MAX = 6;
const ROUNDS = 10;
const CONNECT_DELAY_MS = 400;
// What is being re-established when stop() comes. In the first cycle every connect after the damage is slow
// (the leader's, LISTEN's, the pool's for claims and heartbeats), as when a server is slow to accept. In the
// others only the first connect after it is slow, and nothing else is due before stop(), so one component at
// a time is caught mid-connect: the leader standing again (50 ms after the loss), a heartbeat (within 60 ms),
// LISTEN reconnecting (100 ms); stop()'s own statements then find a connection at once.
const SLOW = 60_000;
const STOP_CYCLES = [
  {
    name: 'everything',
    maintenance: true,
    heartbeatIntervalMs: 100,
    pollIntervalMs: 50,
    slowConnects: Infinity,
  },
  { name: 'the leader', maintenance: true, heartbeatIntervalMs: SLOW, pollIntervalMs: SLOW, slowConnects: 1 },
  { name: 'a heartbeat', maintenance: false, heartbeatIntervalMs: 60, pollIntervalMs: SLOW, slowConnects: 1 },
  { name: 'LISTEN', maintenance: false, heartbeatIntervalMs: SLOW, pollIntervalMs: SLOW, slowConnects: 1 },
];

/** How many of the next connects of a SlowClient start CONNECT_DELAY_MS late. */
let slowConnectsLeft = 0;

/** A pg client that may connect CONNECT_DELAY_MS late (pg.Pool's `Client` option), so that a connection
 * being re-established is in flight long enough for stop() to land inside it. */
class SlowClient extends pg.Client {
  constructor(config?: pg.ClientConfig) {
    super(config);
    const connect = this.connect.bind(this) as (cb: (err?: Error) => void) => void;
    (this as { connect: unknown }).connect = (cb: (err?: Error) => void) => {
      if (slowConnectsLeft <= 0) return connect(cb);
      slowConnectsLeft--;
      setTimeout(() => connect(cb), CONNECT_DELAY_MS);
    };
  }
}

describe('WorkerHost({ pool })', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let admin: pg.Pool;
  beforeAll(async () => {
    ({ db, client } = await migratedDatabase('user_pool', { poolSize: 2 }));
    admin = sidePool(db.url, 2, 'user-pool-test');
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

  it('stop() while its leader and LISTEN connections are being re-established waits for them: nothing is left checked out, leading or connecting', async () => {
    const userPool = new pg.Pool({
      connectionString: db.url,
      max: POOL_MAX,
      application_name: 'user-pool-slow',
      Client: SlowClient,
    });
    userPool.on('error', () => {});
    const kind = defineJob<{ n: number }>({ kind: 'up_slow', queue: 'user_pool_slow' });
    for (const { name, maintenance, heartbeatIntervalMs, pollIntervalMs, slowConnects } of STOP_CYCLES) {
      slowConnectsLeft = 0;
      const cycle = `reconnecting ${name}`;
      const host = new WorkerHost({
        pool: userPool,
        maintenance,
        queues: { user_pool_slow: 2 },
        pollIntervalMs,
        leaderElectionIntervalMs: 50,
        heartbeatIntervalMs,
        shutdownTimeoutMs: 3_000,
      });
      const errors: unknown[] = [];
      host.on('error', (err) => errors.push(err));
      host.register(kind, () => {});
      await host.start();
      if (maintenance)
        await until(`${cycle}: the host to lead`, async () => (await leaderLockHolders(admin)).length === 1);
      // Start-up's claims have ended (one lost with its connection would be retried, and its retry take the
      // slow connect meant for LISTEN).
      await until(`${cycle}: the host's sessions to be idle`, async () => {
        const busy = await admin.query(
          `select 1 from pg_stat_activity where datname = current_database()
              and application_name = 'user-pool-slow' and state <> 'idle'`,
        );
        return busy.rowCount === 0;
      });
      const { rows } = await admin.query<{ ok: boolean }>(
        `select pg_terminate_backend(pid) as ok from pg_stat_activity
          where datname = current_database() and application_name = 'user-pool-slow'`,
      );
      slowConnectsLeft = slowConnects;
      expect(rows.length, `${cycle}`).toBeGreaterThanOrEqual(maintenance ? 2 : 1);
      // The leader stands again after 50 ms and LISTEN reconnects after 100 ms; a slow connect then takes
      // CONNECT_DELAY_MS, so at 200 ms they are in flight.
      await new Promise((r) => setTimeout(r, 200));
      expect(userPool.totalCount - userPool.idleCount, `${cycle}: connections in flight`).toBeGreaterThan(0);
      await host.stop();
      expect(errors.length, `${cycle}: the losses were reported`).toBeGreaterThan(0);
      expect(host.isLeader, `${cycle}`).toBe(false);
      expect(userPool.waitingCount, `${cycle}`).toBe(0);
      expect(userPool.idleCount, `${cycle}: every client back in the pool`).toBe(userPool.totalCount);
      // And nothing that was in flight finishes later: no leader lock, no session of the host's but idle ones.
      await new Promise((r) => setTimeout(r, CONNECT_DELAY_MS + 100));
      expect(await leaderLockHolders(admin), `${cycle}`).toEqual([]);
      expect(userPool.idleCount, `${cycle}: still`).toBe(userPool.totalCount);
    }
    await userPool.end();
  }, 60_000);
});
