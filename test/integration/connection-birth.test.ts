import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, ConnectionError } from '../../src/index.js';
import { createPool, isConnectionLoss, withClient } from '../../src/storage/operations.js';
import type { TestDatabase } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';

// A connection the server ends as it is born. The server's termination can arrive in the same read as the end
// of the connection's start-up, after the pool has stopped listening for the client's errors and before the
// code that checked it out can listen: pg then raises an 'error' event nobody handles, which ends the
// process (found when `awa bench` dropped its database WITH (FORCE) under a host that was connecting). Here
// every backend of one application is terminated as soon as it appears, while calls keep checking out new
// connections: each call must end, in its result or in a connection-loss error, and the process must live;
// on our own pools, and on a pool the user hands to AwaClient.

const APP = 'awa-birth-test';
const CALLS = 200;

describe('connections ended as they start', () => {
  let db: TestDatabase;
  let admin: pg.Client;
  beforeAll(async () => {
    const migrated = await migratedDatabase('connection_birth', { poolSize: 1 });
    db = migrated.db;
    await migrated.client.close();
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.end();
    await db?.drop();
  });

  /**
   * Runs `call` CALLS times while every backend of application `app` is terminated as soon as it appears.
   * Returns how the calls ended and what was raised outside them.
   */
  async function underKiller(app: string, call: () => Promise<unknown>) {
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    let killing = true;
    let killed = 0;
    const killer = (async () => {
      while (killing) {
        const { rows } = await admin.query<{ n: number }>(
          `select count(*) filter (where pg_terminate_backend(pid))::int as n from pg_stat_activity
            where datname = current_database() and application_name = $1`,
          [app],
        );
        killed += rows[0]!.n;
      }
    })();
    let answered = 0;
    const lost: unknown[] = [];
    const other: unknown[] = [];
    try {
      for (let i = 0; i < CALLS; i++) {
        try {
          await call();
          answered++;
        } catch (err) {
          (lostConnection(err) ? lost : other).push(err);
        }
      }
    } finally {
      killing = false;
      await killer;
      process.off('uncaughtException', onUncaught);
    }
    return { uncaught, answered, lost, other, killed };
  }

  /** A connection loss, raw from pg or as the ConnectionError an AwaClient call reports it as. */
  function lostConnection(err: unknown): boolean {
    return isConnectionLoss(err) || (err instanceof ConnectionError && isConnectionLoss(err.cause));
  }

  function expectEveryCallEnded(r: Awaited<ReturnType<typeof underKiller>>): void {
    expect(r.other).toEqual([]);
    expect(r.uncaught).toEqual([]);
    expect(r.answered + r.lost.length).toBe(CALLS);
    // The killer did its damage: backends were terminated and calls lost their connections.
    expect(r.killed).toBeGreaterThan(0);
    expect(r.lost.length).toBeGreaterThan(0);
  }

  it(`${CALLS} calls on our own pool under a backend killer: each ends in its result or a connection loss, and nothing is raised outside them`, async () => {
    const pool = createPool(db.url, 4, APP);
    try {
      const r = await underKiller(APP, async () => {
        const { rows } = await withClient(pool, 'the test database', (c) =>
          c.query<{ one: number }>('select 1 as one'),
        );
        expect(rows).toEqual([{ one: 1 }]);
      });
      expectEveryCallEnded(r);
    } finally {
      await pool.end();
    }
  });

  it(`${CALLS} calls of an AwaClient on the user's own pool under a backend killer: the same`, async () => {
    const app = `${APP}-user`;
    // The user's pool, set up as pg's documentation asks (an 'error' listener on the pool), nothing more.
    const userPool = new pg.Pool({ connectionString: db.url, max: 4, application_name: app });
    userPool.on('error', () => {});
    const client = new AwaClient({ pool: userPool });
    try {
      // migrate() checks a connection out for its whole run (here: finds the schema current).
      const r = await underKiller(app, () => client.migrate());
      expectEveryCallEnded(r);
      // Reported as the typed error, saying the connection was lost under the call (not "cannot connect").
      const messages = r.lost.map((err) => (err as Error).message);
      expect(messages.filter((m) => !m.startsWith('Lost the connection to PostgreSQL'))).toEqual([]);
    } finally {
      await client.close();
      await userPool.end();
    }
  });
});
