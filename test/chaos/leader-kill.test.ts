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
    const uids = Array.from({ length: NOW + SCHEDULED }, (_, i) =>
      i < NOW ? `lead-now-${i}` : `lead-sched-${i - NOW}`,
    );
    const ids = (
      await client.enqueueMany(
        uids.map((uid, i) => ({
          kind: chaosSleep,
          args: { uid },
          options: i < NOW ? {} : { runAt: new Date(runAtMs) },
        })),
      )
    ).map((r) => r.id);
    const expected: ExpectedJob[] = ids.map((id, i) => ({
      id,
      uid: uids[i]!,
      kind: chaosSleep.kind,
      state: 'completed',
    }));
    const scheduledIds = new Set(ids.slice(NOW));

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
      const killedAt = await leader.kill();
      // Read once the process is dead, so its log is final: the attempts it started and never ended.
      const orphans = leader.running();
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
});
