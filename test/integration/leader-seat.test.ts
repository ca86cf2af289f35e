import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient } from '../../src/index.js';
import { heartbeat, registerInstance, standForLeader, type Schema } from '../../src/storage/operations.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { until } from '../helpers/wait.js';

// stand_for_leader() on real sessions: a live leader keeps its seat; one whose instance fell silent has its
// session ended by the next host that stands, which then leads; a backend id an older instance row still names
// is not taken for that instance's; a role that may not end the session says so instead of failing.

const STALENESS_S = 2;

describe('standing for leadership', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let schema: Schema;
  let admin: pg.Pool;
  const sessions: pg.Client[] = [];

  const session = async (connectionString = db.url): Promise<pg.Client> => {
    const c = new pg.Client({ connectionString, application_name: 'leader-seat-test' });
    c.on('error', () => {});
    await c.connect();
    sessions.push(c);
    return c;
  };
  const silence = (instance: string) =>
    admin.query(
      `update awa.runtime_instances set heartbeat_at = now() - interval '1 minute' where instance_id = $1`,
      [instance],
    );
  const backendPid = async (c: pg.Client) =>
    (await c.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;

  beforeAll(async () => {
    db = await createTestDatabase('leader_seat');
    client = new AwaClient({ connectionString: db.url, poolSize: 2 });
    await client.migrate();
    schema = client.schema;
    admin = new pg.Pool({ connectionString: db.url, max: 2 });
    for (const id of ['a', 'b', 'c'])
      await registerInstance(admin, schema, id, [{ queue: 'q', dlq: false, concurrency: 1 }], 'test');
  });
  afterAll(async () => {
    await Promise.all(sessions.map((s) => s.end().catch(() => {})));
    await admin?.end();
    await client?.close();
    await db?.drop();
  });

  it('keeps a live leader, ends a silent one and takes its place; a reused backend id is not a silent seat', async () => {
    const a = await session();
    const b = await session();
    for (const id of ['a', 'b'])
      await heartbeat(admin, schema, id, { inFlight: 0, isLeader: false, leaderPid: null });
    const aPid = await backendPid(a);
    expect(await standForLeader(a, schema, 'a', STALENESS_S)).toEqual({
      outcome: 'leader',
      backendPid: aPid,
    });
    const seatOf = async (id: string) =>
      (await admin.query('select leader_pid from awa.runtime_instances where instance_id = $1', [id])).rows;
    expect(await seatOf('a')).toEqual([{ leader_pid: aPid }]);
    // A heartbeat whose snapshot was taken just before a won the lock (not leader yet) lands after it: the seat
    // must survive it, or a frozen a could never be unseated.
    expect(await heartbeat(admin, schema, 'a', { inFlight: 0, isLeader: false, leaderPid: null })).toBe(true);
    expect(await seatOf('a')).toEqual([{ leader_pid: aPid }]);
    // a heartbeats (fresh row): b waits its turn, however often it stands.
    for (let i = 0; i < 3; i++)
      expect(await standForLeader(b, schema, 'b', STALENESS_S)).toEqual({ outcome: 'held' });
    expect((await leaderLockHolders(admin)).map((h) => h.pid)).toEqual([aPid]);

    // a loses track of its leader session (the connection dropped on its side; the server kept the session, as
    // with a half-open connection) and stands again on a new one: its own old session is ended once it has sat
    // idle past the window, not before.
    const a2 = await session();
    expect(await standForLeader(a2, schema, 'a', STALENESS_S)).toEqual({ outcome: 'held' });
    await new Promise((r) => setTimeout(r, STALENESS_S * 1000 + 200));
    expect(await standForLeader(a2, schema, 'a', STALENESS_S)).toEqual({
      outcome: 'unseated',
      instance: 'a',
    });
    await expect(a.query('select 1')).rejects.toThrow();
    await until(
      'a to lead again',
      async () => (await standForLeader(a2, schema, 'a', STALENESS_S)).outcome === 'leader',
    );
    const a2Pid = await backendPid(a2);
    expect(await seatOf('a')).toEqual([{ leader_pid: a2Pid }]);

    // a falls silent (as a frozen process does: its session and lock stay).
    await silence('a');
    expect(await standForLeader(b, schema, 'b', STALENESS_S)).toEqual({ outcome: 'unseated', instance: 'a' });
    await expect(a2.query('select 1')).rejects.toThrow();
    const bPid = await backendPid(b);
    await until(
      'b to lead',
      async () => (await standForLeader(b, schema, 'b', STALENESS_S)).outcome === 'leader',
    );
    expect((await leaderLockHolders(admin)).map((h) => h.pid)).toEqual([bPid]);

    // b heartbeats (the test has run past the 2 s window since b registered).
    expect(await heartbeat(admin, schema, 'b', { inFlight: 0, isLeader: true, leaderPid: bPid })).toBe(true);
    // c's row names b's backend too, from longer ago, and c is silent: the seat is b's (the latest to name
    // that backend), and b is live, so nobody is unseated.
    await admin.query(
      `update awa.runtime_instances set leader_pid = $1, leader_since = now() - interval '1 hour',
              heartbeat_at = now() - interval '1 hour' where instance_id = 'c'`,
      [bPid],
    );
    const c = await session();
    expect(await standForLeader(c, schema, 'c', STALENESS_S)).toEqual({ outcome: 'held' });
    expect(await standForLeader(c, schema, 'a', STALENESS_S)).toEqual({ outcome: 'held' });
    expect((await leaderLockHolders(admin)).map((h) => h.pid)).toEqual([bPid]);

    // A stopping host marks itself stopped before it releases the lock: marked, but not silent, it keeps it.
    await admin.query(`update awa.runtime_instances set stopped_at = now() where instance_id = 'b'`);
    expect(await standForLeader(c, schema, 'c', STALENESS_S)).toEqual({ outcome: 'held' });
    expect((await leaderLockHolders(admin)).map((h) => h.pid)).toEqual([bPid]);
    await b.end();
  });

  it('a role that may not end the silent leader session gets "refused", and the lock stays where it is', async () => {
    // The holder runs as the superuser the tests connect as; a plain role may not signal its backends.
    const role = `${db.name}_plain`.slice(0, 63);
    await admin.query(`create role "${role}" login`);
    try {
      await admin.query(`grant usage on schema awa to "${role}"`);
      await admin.query(`grant select, update on awa.runtime_instances to "${role}"`);
      const holder = await session();
      await until(
        'the holder to lead',
        async () => (await standForLeader(holder, schema, 'a', STALENESS_S)).outcome === 'leader',
      );
      await silence('a');
      const url = new URL(db.url);
      url.username = role;
      url.password = '';
      const plain = await session(url.toString());
      expect(await standForLeader(plain, schema, 'b', STALENESS_S)).toEqual({
        outcome: 'refused',
        instance: 'a',
      });
      expect((await leaderLockHolders(admin)).map((h) => h.pid)).toEqual([await backendPid(holder)]);
      await plain.end();
      await holder.end();
    } finally {
      await admin.query(`drop owned by "${role}"`);
      await admin.query(`drop role "${role}"`);
    }
  });
});
