import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import { defineJob, WorkerHost, type JobKind } from '../../src/index.js';
import { claimJobs, resolveSchema } from '../../src/storage/operations.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// The LISTEN/NOTIFY wake-up. The host polls only every 30 s here, so a job picked up within two seconds
// was brought by its notification (the bound tells notification from poll; it is not a performance
// figure). The LISTEN connection is then terminated from the server side: the host must reconnect,
// LISTEN again, and keep waking on notifications. Between notifications the host claims on that same
// connection (the session that delivered the wake-up), so its loss can also come in the middle of a claim.

const POLL_MS = 30_000;
const WAKE_BOUND_MS = 2_000;

/** Polls every 10 ms (the wake-ups measured here take a few). */
const waitFor = (what: string, cond: () => boolean | Promise<boolean>, timeoutMs: number) =>
  until(what, async () => await cond(), timeoutMs, 10);

describe('LISTEN/NOTIFY wake-up', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let admin: pg.Pool;
  let host: WorkerHost | undefined;

  beforeAll(async () => {
    ({ db, client } = await migratedDatabase('wakeup', { poolSize: 2 }));
    admin = sidePool(db.url, 1, 'wakeup-test');
  });
  // A host a failed test left running would add a second wake-up session to the next test's database.
  afterEach(async () => {
    await host?.stop();
    host = undefined;
  });
  afterAll(async () => {
    await host?.stop();
    await client?.close();
    await admin?.end();
    await db?.drop();
  });

  /** The host's wake-up sessions, idle between statements, with the last statement each ran. */
  const wakeSessions = async (): Promise<{ pid: number; query: string }[]> => {
    const { rows } = await admin.query<{ pid: number; query: string }>(
      `select pid, query from pg_stat_activity
        where datname = current_database() and application_name = 'awa-listen' and state = 'idle'`,
    );
    return rows;
  };
  const listening = async (): Promise<number[]> => (await wakeSessions()).map((r) => r.pid);
  /** A claim call, as pg_stat_activity shows the statement text (the pattern reads the same in SQL). */
  const CLAIM_STATEMENT = /\.claim\(/;
  /** Waits for the host's one wake-up session to be a new one, after `old` was terminated. */
  const newWakeSession = (old: number) =>
    waitFor(
      'a new wake-up session',
      async () => {
        const now = await listening();
        return now.length === 1 && now[0] !== old;
      },
      10_000,
    );
  /** The host's one wake-up session, from the read that found it idle (a second read could find it busy). */
  const idleWakeSession = async () => {
    const [session] = await until(
      'the wake-up session to be idle',
      async () => {
        const sessions = await wakeSessions();
        return sessions.length === 1 && sessions;
      },
      5_000,
      10,
    );
    return session!;
  };
  /** The last statement of the host's wake-up session, once idle, was a claim (not run on a pooled one). */
  const expectLastClaimOnWakeSession = async () => {
    expect([(await idleWakeSession()).query]).toEqual([expect.stringMatching(CLAIM_STATEMENT)]);
  };

  /**
   * Starts `host` serving `kind`'s queue (polling only every POLL_MS), with `onRun` called per job, and waits
   * for its one wake-up session to be idle: start() claims once at once, on that session when it is free.
   * Returns the host, the errors it reports and its wake-up session's pid, from the read that found it idle
   * (idle may be between its LISTEN and that first claim, so a second read could find it busy: CI once
   * failed that way).
   */
  const startHost = async (kind: JobKind<unknown>, onRun: (jobId: string) => void) => {
    // A host stopped before may still have its wake-up backend exiting: wait until it is gone, so the one
    // session found below is this host's.
    await waitFor(
      'no wake-up session in the database',
      async () =>
        (
          await admin.query(
            `select 1 from pg_stat_activity where datname = current_database() and application_name = 'awa-listen'`,
          )
        ).rows.length === 0,
      5_000,
    );
    const errors: unknown[] = [];
    const started = new WorkerHost({
      connectionString: db.url,
      queues: { [kind.queue]: 2 },
      pollIntervalMs: POLL_MS,
      maintenance: false,
    });
    host = started;
    started.on('error', (err) => errors.push(err));
    started.register(kind, (j) => {
      onRun(j.id);
    });
    await started.start();
    return { host: started, errors, first: (await idleWakeSession()).pid };
  };

  it('wakes on a new job well before its poll, and again after its LISTEN connection is terminated', async () => {
    const kind = defineJob({ kind: 'wake', queue: 'q_wake' });
    const ran = new Map<string, number>();
    const { host: h, errors, first } = await startHost(kind, (id) => ran.set(id, Date.now()));
    // start() has claimed once already and found nothing; the poll is 30 s away.
    await sleep(200);
    const claimsBefore = h.stats.claimCalls;

    const enqueuedAt = Date.now();
    const a = (await client.enqueue(kind, {})).id;
    await waitFor('the first job to run', () => ran.has(a), WAKE_BOUND_MS);
    expect(ran.get(a)! - enqueuedAt).toBeLessThan(WAKE_BOUND_MS);
    expect(h.stats.claimCalls).toBeGreaterThan(claimsBefore);
    expect(errors).toEqual([]);
    // The claim that picked it up ran on the wake-up session itself, not on a pooled one.
    await expectLastClaimOnWakeSession();

    // The server ends the LISTEN session.
    const { rows } = await admin.query<{ ok: boolean }>(
      `select pg_terminate_backend(pid) as ok from pg_stat_activity
        where datname = current_database() and application_name = 'awa-listen'`,
    );
    expect(rows).toEqual([{ ok: true }]);
    // The host notices, reports it, and listens again on a new session.
    await newWakeSession(first);
    expect(errors.length).toBeGreaterThanOrEqual(1);
    // Reconnecting polls once (notifications sent while it was down are lost): let that poll pass, so
    // the next job can only arrive by notification.
    await sleep(300);
    const claimsAfterReconnect = h.stats.claimCalls;
    const reenqueuedAt = Date.now();
    const b = (await client.enqueue(kind, {})).id;
    await waitFor('the job enqueued after the reconnect to run', () => ran.has(b), WAKE_BOUND_MS);
    expect(ran.get(b)! - reenqueuedAt).toBeLessThan(WAKE_BOUND_MS);
    expect(h.stats.claimCalls).toBeGreaterThan(claimsAfterReconnect);

    await h.stop();
    host = undefined;
    expect(await client.getJob(a)).toMatchObject({ state: 'completed', attempt: 1 });
    expect(await client.getJob(b)).toMatchObject({ state: 'completed', attempt: 1 });
  });

  // The wake-up session dies while a claim runs on it: the claim is held inside the claim() call (its read
  // of the receipts waits on a lock the test holds), and the session is terminated there. The claim never
  // committed; the host must report it, reconnect, and run the job exactly once, still woken by
  // notifications (claiming on the new session).
  it('survives its wake-up session being terminated in the middle of a claim', async () => {
    const kind = defineJob({ kind: 'cut', queue: 'q_cut' });
    const ran: string[] = [];
    const { host: h, errors, first } = await startHost(kind, (id) => ran.push(id));

    const blocker = new pg.Client({ connectionString: db.url, application_name: 'wakeup-blocker' });
    await blocker.connect();
    let blocking = true;
    try {
      await blocker.query('begin');
      await blocker.query('lock table awa.claim_batches in access exclusive mode');
      const c = (await client.enqueue(kind, {})).id;
      const stuck = async () => {
        const { rows } = await admin.query<{ pid: number }>(
          `select pid from pg_stat_activity
            where datname = current_database() and application_name = 'awa-listen'
              and wait_event_type = 'Lock' and query ~ $1`,
          [CLAIM_STATEMENT.source],
        );
        return rows.map((r) => r.pid);
      };
      await waitFor('a claim held on the wake-up session', async () => (await stuck()).length === 1, 5_000);
      expect(await stuck()).toEqual([first]);
      const { rows } = await admin.query<{ ok: boolean }>('select pg_terminate_backend($1) as ok', [first]);
      expect(rows).toEqual([{ ok: true }]);
      await waitFor('the session to end', async () => !(await listening()).includes(first), 5_000);
      await blocker.query('rollback');
      blocking = false;

      await waitFor('the job to run after the reconnect', () => ran.includes(c), 10_000);
      await newWakeSession(first);
      // The host said what happened (the lost claim, the lost session).
      expect(errors.length).toBeGreaterThanOrEqual(1);

      await sleep(300);
      const enqueuedAt = Date.now();
      const d = (await client.enqueue(kind, {})).id;
      await waitFor('a job enqueued after the reconnect to run', () => ran.includes(d), WAKE_BOUND_MS);
      expect(Date.now() - enqueuedAt).toBeLessThan(WAKE_BOUND_MS);
      await expectLastClaimOnWakeSession();

      await h.stop();
      host = undefined;
      expect(ran.filter((id) => id === c)).toHaveLength(1);
      expect(await client.getJob(c)).toMatchObject({ state: 'completed', attempt: 1 });
      expect(await client.getJob(d)).toMatchObject({ state: 'completed', attempt: 1 });
    } finally {
      if (blocking) await blocker.query('rollback').catch(() => {});
      await blocker.end();
    }
  });

  // Which enqueues send a wake-up (reserve_lane()): at most one per lane every 5 ms, except the first
  // position after the lane's drained mark, which a claimer that took fewer jobs than it asked for leaves
  // behind. The lane's last wake-up is set in the future before each enqueue, so the 5 ms rule alone would
  // stay silent every time: what is heard comes from the drained mark.
  it('wakes the hosts for the first job after a drained lane however close to the last wake-up, and keeps the spacing behind a backlog', async () => {
    const queue = 'q_drained';
    const schema = resolveSchema();
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    try {
      const heard: string[] = [];
      listener.on('notification', (n) => heard.push(n.payload ?? ''));
      await listener.query(`listen ${listener.escapeIdentifier(schema.jobsChannel)}`);
      // The lanes exist before the first enqueue, so its 5 ms rule can be silenced too.
      await client.setEnqueueShards(queue, 1, { create: true });
      const silence = () =>
        admin.query(
          `select setval(notify_seq, (extract(epoch from clock_timestamp()) * 1000)::bigint + 600000, true)
             from awa.lanes where queue = $1`,
          [queue],
        );
      const enqueue = async () => {
        await silence();
        return (await client.enqueue('k', {}, { queue })).id;
      };
      const claim = () =>
        claimJobs(client.pool, schema, {
          queue,
          max: 10,
          instanceId: 'wakeup-test',
          agingSeconds: 3600,
          deadlineSeconds: 60,
        });
      const heardAfter = async (n: number) => {
        // A notification reaches the listener after the enqueue's commit; a round trip on the listener's
        // own connection lets every one sent before it arrive first.
        await listener.query('select 1');
        return heard.length - n;
      };

      // A new lane: drained mark 0, the first position wakes.
      await enqueue();
      expect(await heardAfter(0)).toBe(1);
      // Behind it, nobody has claimed: the 5 ms rule holds (silent), twice.
      await enqueue();
      await enqueue();
      expect(await heardAfter(1)).toBe(0);
      // A claim takes the three, fewer than the ten it asked for: the lane is drained up to 3.
      const first = await claim();
      expect(first.batches.flatMap((b) => b.jobs)).toHaveLength(3);
      // The next position, 4, wakes; position 5 (4 not yet claimed) does not.
      await enqueue();
      expect(await heardAfter(1)).toBe(1);
      await enqueue();
      expect(await heardAfter(2)).toBe(0);
      expect(heard).toEqual([queue, queue]);
      // A claim that takes as many as it asked for does not mark the lane drained.
      await enqueue();
      const full = await claimJobs(client.pool, schema, {
        queue,
        max: 2,
        instanceId: 'wakeup-test',
        agingSeconds: 3600,
        deadlineSeconds: 60,
      });
      expect(full.batches.flatMap((b) => b.jobs)).toHaveLength(2);
      await enqueue();
      expect(await heardAfter(2)).toBe(0);
    } finally {
      await listener.end();
    }
  });
});
