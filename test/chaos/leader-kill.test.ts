// Chaos: SIGKILL the maintenance leader (twice in a row) while jobs run and others are scheduled a few
// seconds ahead. Each time another process takes the leadership, rescues the dead leader's attempts and
// promotes the scheduled jobs when they fall due.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwaClient } from '../../src/index.js';
import { chaosSleep, type ChaosLine } from '../fixtures/chaos-jobs.js';
import {
  ChaosWorker,
  printReport,
  waitFor,
  waitForTerminal,
  workerConfig,
  openScene,
  closeScene,
  type Scene,
} from './harness.js';
import { verifyRun, type ExpectedJob } from './invariants.js';
import { leaderLockHolders } from '../helpers/leader-lock.js';
import { unseatAfterMs } from '../../src/maintenance/elector.js';

describe('chaos: the maintenance leader dies', () => {
  let db: Scene['db'];
  let client: AwaClient;
  let logs: Scene['logs'];
  const workers: ChaosWorker[] = [];

  let scene: Scene | undefined;
  beforeAll(async () => {
    scene = await openScene('leader');
    ({ db, client, logs } = scene);
  });
  afterAll(async () => {
    await closeScene(scene, workers);
  });

  /** `now` jobs runnable at once and `scheduled` ones due at `runAtMs`, on `queue`; all must complete. */
  const enqueueRun = async (
    prefix: string,
    queue: string,
    now: number,
    scheduled: number,
    runAtMs: number,
  ) => {
    const uids = Array.from({ length: now + scheduled }, (_, i) =>
      i < now ? `${prefix}-now-${i}` : `${prefix}-sched-${i - now}`,
    );
    const ids = (
      await client.enqueueMany(
        uids.map((uid, i) => ({
          kind: chaosSleep,
          args: { uid },
          options: i < now ? { queue } : { queue, runAt: new Date(runAtMs) },
        })),
      )
    ).map((r) => r.id);
    const expected: ExpectedJob[] = ids.map((id, i) => ({
      id,
      uid: uids[i]!,
      kind: chaosSleep.kind,
      state: 'completed',
    }));
    return { expected, scheduledIds: new Set(ids.slice(now)) };
  };

  it('SIGKILL of the leader, twice: another process takes over, rescues its attempts and promotes scheduled jobs', async () => {
    workers.push(
      ...(await Promise.all(
        ['lead-a', 'lead-b', 'lead-c'].map((id) =>
          ChaosWorker.spawn(
            logs.dir,
            workerConfig(db.url, id, { sleepMs: 300, queues: { chaos: { concurrency: 4 } } }),
          ),
        ),
      )),
    );
    const alive = () => workers.filter((w) => w.killedAt === null);
    const leaders = () => alive().filter((w) => w.isLeader());
    await waitFor('one leader', () => leaders().length === 1, 10_000);

    const NOW = 200;
    const SCHEDULED = 60;
    const runAtMs = Date.now() + 4_000;
    const { expected, scheduledIds } = await enqueueRun('lead', 'chaos', NOW, SCHEDULED, runAtMs);

    const failovers: {
      from: string;
      to: string;
      failoverMs: number;
      killToRescueMs: number;
      orphans: number;
    }[] = [];
    for (let round = 0; round < 2; round++) {
      const leader = leaders()[0]!;
      await waitFor(
        `leader ${leader.instanceId} to be mid-job`,
        () => leader.running().length >= 2,
        20_000,
        5,
      );
      // The attempts it started and never ended: read while it is stopped, then it dies with them.
      const orphans = await leader.stopMidJob();
      const killedAt = await leader.kill();
      expect(orphans.length).toBeGreaterThan(0);
      await waitFor('a new leader', () => leaders().length === 1, 15_000);
      const next = leaders()[0]!;
      const line = next
        .lines()
        .find(
          (l): l is Extract<ChaosLine, { event: 'leadership' }> =>
            l.event === 'leadership' && l.isLeader && l.t >= killedAt,
        );
      // The new leader rescues the dead leader's attempts.
      const keys = orphans.map((a) => `${a.id}:${a.runLease}`);
      await waitFor(
        `${next.instanceId} to rescue the attempts of ${leader.instanceId}`,
        () => {
          const rescued = new Set(
            next
              .lines()
              .flatMap((l) => (l.event === 'rescue' ? l.rescued.map((r) => `${r.jobId}:${r.runLease}`) : [])),
          );
          return keys.every((k) => rescued.has(k));
        },
        20_000,
      );
      const rescue = next
        .lines()
        .find((l) => l.event === 'rescue' && l.rescued.some((r) => r.instanceId === leader.instanceId));
      failovers.push({
        from: leader.instanceId,
        to: next.instanceId,
        failoverMs: line ? line.t - killedAt : -1,
        killToRescueMs: rescue ? rescue.t - killedAt : -1,
        orphans: orphans.length,
      });
    }
    await waitForTerminal(client, ['chaos'], NOW + SCHEDULED, 50_000, workers);
    const survivor = alive()[0]!;
    expect(alive()).toHaveLength(1);
    await survivor.stop();

    const report = await verifyRun(client, expected, workers);
    printReport('sigkill-leader', report, {
      workers: workers.length,
      scheduled: SCHEDULED,
      failovers: JSON.stringify(failovers),
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: NOW + SCHEDULED, completed: NOW + SCHEDULED, failed: 0, lost: 0 });
    expect(failovers).toHaveLength(2);
    for (const f of failovers) expect(f.failoverMs).toBeGreaterThanOrEqual(0);
    // Every scheduled job ran, and none before its time.
    const starts = workers
      .flatMap((w) => w.lines())
      .flatMap((l) => (l.event === 'start' && scheduledIds.has(l.id) ? [l] : []));
    expect(new Set(starts.map((l) => l.id)).size).toBe(SCHEDULED);
    for (const s of starts) expect(s.t).toBeGreaterThanOrEqual(runAtMs);
  }, 60_000);

  it('SIGSTOP of the leader past the staleness window: a survivor ends its silent session, leads, rescues its attempts and promotes; the thawed process stands down', async () => {
    const run = await Promise.all(
      ['frozen-a', 'frozen-b'].map((id) =>
        ChaosWorker.spawn(
          logs.dir,
          workerConfig(db.url, id, { sleepMs: 200, queues: { frozen: { concurrency: 5 } } }),
        ),
      ),
    );
    workers.push(...run);
    await waitFor('a leader among the new workers', () => run.some((w) => w.isLeader()), 10_000);
    const leader = run.find((w) => w.isLeader())!;
    const survivor = run.find((w) => w !== leader)!;
    const NOW = 150;
    const SCHEDULED = 30;
    const runAtMs = Date.now() + 5_000;
    // A queue of its own: the counts of the test above are in 'chaos'.
    const { expected } = await enqueueRun('frozen', 'frozen', NOW, SCHEDULED, runAtMs);
    await waitFor('the leader to be mid-job', () => leader.running().length >= 2, 20_000, 5);
    const stuck = await leader.stopMidJob();
    const frozenAt = leader.frozen[0]![0];
    expect(stuck.length).toBeGreaterThan(0);
    // The frozen process's session still holds the lock (its socket is open); only a survivor that ends that
    // session can lead, once the frozen instance has been silent for unseatAfterMs(): 10 s with these workers'
    // 1.5 s staleness. Until then nobody rescues the frozen leader's attempts or promotes: it is the leader.
    await waitFor('the survivor to lead', () => survivor.isLeader(), 30_000);
    const tookOverAt = survivor
      .lines()
      .find((l) => l.event === 'leadership' && l.isLeader && l.t >= frozenAt)!.t;
    // Not sooner: a host whose heartbeat is merely late keeps leading (its last heartbeat came at most one
    // 200 ms interval before the freeze).
    expect(tookOverAt - frozenAt).toBeGreaterThanOrEqual(unseatAfterMs(1_500) - 250);
    const [holder, ...others] = await leaderLockHolders(scene!.pool);
    expect(others).toEqual([]);
    const seat = await scene!.pool.query<{ instance_id: string }>(
      'select instance_id from awa.runtime_instances where leader_pid = $1',
      [holder!.pid],
    );
    expect(seat.rows.map((r) => r.instance_id)).toEqual([survivor.instanceId]);
    const keys = new Set(stuck.map((a) => `${a.id}:${a.runLease}`));
    await waitFor(
      "the frozen leader's attempts to be rescued",
      () => {
        const rescued = new Set(
          survivor
            .lines()
            .flatMap((l) => (l.event === 'rescue' ? l.rescued.map((r) => `${r.jobId}:${r.runLease}`) : [])),
        );
        return [...keys].every((k) => rescued.has(k));
      },
      20_000,
    );
    // Scheduled jobs fall due while the old leader is still frozen: only the new one can promote them.
    await waitForTerminal(client, ['frozen'], NOW + SCHEDULED, 45_000, [survivor]);
    leader.thaw();
    await waitFor('the thawed process to stand down', () => !leader.isLeader(), 20_000);
    await Promise.all(run.map((w) => w.stop()));

    // Errors are expected here, and only these: the survivor's report of the session it ended, and the thawed
    // process finding its leader session gone (in the driver's words for a query on that connection, whether it
    // noticed the termination before sending the query or after).
    const report = await verifyRun(client, expected, run, { allowWorkerErrors: true });
    printReport('sigstop-leader', report, {
      workers: run.length,
      stalledAttempts: stuck.length,
      freezeToLeadMs: tookOverAt - frozenAt,
    });
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({ jobs: NOW + SCHEDULED, completed: NOW + SCHEDULED, failed: 0, lost: 0 });
    const errors = (w: typeof leader) => w.lines().flatMap((l) => (l.event === 'error' ? [l.message] : []));
    expect(errors(survivor).length).toBeGreaterThan(0);
    for (const m of errors(survivor))
      expect(m).toMatch(new RegExp(`^This host ended the leader session of instance ${leader.instanceId},`));
    for (const m of errors(leader))
      expect(m).toMatch(
        /^(terminating connection due to administrator command|Connection terminated unexpectedly|Client has encountered a connection error and is not queryable)$/,
      );
  }, 90_000);
});
