import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import { WorkerHost, defineJob } from '../../src/index.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { until } from '../helpers/wait.js';

// A host's long-lived connections (the leader's, LISTEN's) are set up by one statement and then adopted. The
// server may end such a session right after answering that statement, and pg can report the loss before the
// statement's caller resumes (both arrive in one read). The host must not adopt the dead connection: it would
// believe it leads while holding no lock (nobody promotes or rescues again, on any host), or believe it
// listens while deaf (every pickup waits for the poll). That is what a CI run of user-pool.test.ts met once
// in 10 rounds of terminating every backend. Here the loss is made to land exactly in that gap: a pg Client
// whose chosen statement, once answered, has its session terminated, and hands the answer back only after
// pg has reported the loss.

/** The statement whose session is lost before its caller sees the answer (null: none). */
let loseAfter: RegExp | null = null;
/** The backends that ran a LISTEN, in order (the wake-up session also runs claims, so its last statement
 * in pg_stat_activity does not tell it). */
const listeners: number[] = [];
let admin: pg.Pool;

class LosingClient extends pg.Client {
  constructor(config?: pg.ClientConfig) {
    super(config);
    const query = this.query.bind(this) as (...args: unknown[]) => unknown;
    (this as { query: unknown }).query = (...args: unknown[]) => {
      const result = query(...args);
      const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string } | undefined)?.text;
      const pid = (this as unknown as { processID: number }).processID;
      if (text?.startsWith('listen ')) listeners.push(pid);
      if (!loseAfter || !text || !loseAfter.test(text) || !(result instanceof Promise)) return result;
      loseAfter = null;
      return result.then(async (answer: unknown) => {
        const reported = new Promise((resolve) => this.once('error', resolve));
        await admin.query('select pg_terminate_backend($1)', [pid]);
        await reported;
        return answer;
      });
    };
  }
}

describe('a connection lost between its setup statement and its adoption', () => {
  let db: TestDatabase;
  let client: AwaClient;
  beforeAll(async () => {
    ({ db, client } = await migratedDatabase('lost_adopted', { poolSize: 2 }));
    admin = sidePool(db.url, 1, 'lost-adopted-test');
  });
  afterAll(async () => {
    await client?.close();
    await admin?.end();
    await db?.drop();
  });

  const hostOn = (pool: pg.Pool, queue: string, maintenance: boolean) => {
    const errors: unknown[] = [];
    const host = new WorkerHost({
      pool,
      maintenance,
      queues: { [queue]: 2 },
      // Only a notification can bring a job within the test's bounds.
      pollIntervalMs: 60_000,
      leaderElectionIntervalMs: 50,
    });
    host.on('error', (err) => errors.push(err));
    return { host, errors };
  };
  const losingPool = (name: string) => {
    const pool = new pg.Pool({
      connectionString: db.url,
      max: 6,
      application_name: name,
      Client: LosingClient,
    });
    pool.on('error', () => {});
    return pool;
  };

  it('the leader: an election whose session is lost as it wins leads nothing, and the next one takes the lock', async () => {
    const pool = losingPool('lost-adopted-leader');
    const { host, errors } = hostOn(pool, 'lost_leader', true);
    host.register(defineJob({ kind: 'lost_leader_job', queue: 'lost_leader' }), () => {});
    loseAfter = /stand_for_leader/;
    try {
      await host.start();
      await until('the first election to be lost', async () => loseAfter === null, 5_000);
      // The lock is held again by a session of this host, and the host knows it leads (the server grants the
      // lock a moment before the host reads the answer, hence one wait for both).
      await until(
        'a leader again',
        async () => host.isLeader && (await leaderLockHolders(admin)).length === 1,
        5_000,
      );
      expect((await leaderLockHolders(admin))[0]!.applicationName).toBe('lost-adopted-leader');
      expect(errors.some((e) => /terminat/i.test(String(e)))).toBe(true);
    } finally {
      await host.stop();
      await pool.end();
    }
  }, 30_000);

  it('LISTEN: a reconnect whose session is lost as it listens is retried, and notifications wake the host again', async () => {
    const pool = losingPool('lost-adopted-listen');
    const { host, errors } = hostOn(pool, 'lost_listen', false);
    const kind = defineJob<{ n: number }>({ kind: 'lost_listen_job', queue: 'lost_listen' });
    const done = new Set<number>();
    host.register(kind, (job) => void done.add(job.args.n));
    listeners.length = 0;
    try {
      await host.start();
      // Take LISTEN down; its reconnect's LISTEN is the statement whose session is lost.
      expect(listeners).toHaveLength(1);
      loseAfter = /^listen /;
      await admin.query('select pg_terminate_backend($1)', [listeners[0]]);
      await until('the reconnect to be lost', async () => loseAfter === null, 5_000);
      await until('a third LISTEN session', async () => listeners.length === 3, 5_000);
      const alive = await admin.query('select 1 from pg_stat_activity where pid = $1', [listeners[2]]);
      expect(alive.rowCount).toBe(1);
      // A job is now picked up through its notification (the poll is a minute away).
      await client.enqueue(kind, { n: 1 });
      await until('the job to run', async () => done.has(1), 5_000);
      expect(errors.filter((e) => /terminat/i.test(String(e))).length).toBeGreaterThanOrEqual(2);
    } finally {
      await host.stop();
      await pool.end();
    }
  }, 30_000);
});
