import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool, isConnectionLoss, withClient } from '../../src/storage/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';

// A connection the server ends as it is born. The server's termination can arrive in the same read as the end
// of the connection's start-up, after the pool has stopped listening for the client's errors and before the
// code that checked it out can listen: pg then raises an 'error' event nobody handles, which ends the
// process (found when `awa bench` dropped its database WITH (FORCE) under a host that was connecting). Here
// every backend of one application is terminated as soon as it appears, while calls keep checking out new
// connections: each call must end, in its result or in a connection-loss error, and the process must live.

const APP = 'awa-birth-test';
const CALLS = 300;

describe('connections ended as they start', () => {
  let db: TestDatabase;
  let admin: pg.Client;
  beforeAll(async () => {
    db = await createTestDatabase('connection_birth');
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.end();
    await db?.drop();
  });

  it(`${CALLS} calls under a backend killer: each ends in its result or a connection loss, and nothing is raised outside them`, async () => {
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    const pool = createPool(db.url, 4, APP);
    let killing = true;
    let killed = 0;
    const killer = (async () => {
      while (killing) {
        const { rows } = await admin.query<{ n: number }>(
          `select count(*) filter (where pg_terminate_backend(pid))::int as n from pg_stat_activity
            where datname = current_database() and application_name = $1`,
          [APP],
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
          const { rows } = await withClient(pool, 'the test database', (c) =>
            c.query<{ one: number }>('select 1 as one'),
          );
          expect(rows).toEqual([{ one: 1 }]);
          answered++;
        } catch (err) {
          (isConnectionLoss(err) ? lost : other).push(err);
        }
      }
    } finally {
      killing = false;
      await killer;
      await pool.end();
      process.off('uncaughtException', onUncaught);
    }
    expect(other).toEqual([]);
    expect(uncaught).toEqual([]);
    expect(answered + lost.length).toBe(CALLS);
    // The killer did its damage: backends were terminated and calls lost their connections.
    expect(killed).toBeGreaterThan(0);
    expect(lost.length).toBeGreaterThan(0);
  });
});
