// Chaos: a per-second cron schedule while the maintenance leader is SIGKILLed again and again. Three worker
// processes declare the schedule; every ~2.5 s the current leader is killed (its leadership, and any fire
// it had in flight, die with its connection) and a fresh process replaces it. From the database afterwards:
// no fire time has more than one job, every second between the first and the last fire has its job
// (each failover is shorter than the workers' cronMissedAfterMs, 30 s), and fires resumed after each failover.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ChaosWorker,
  assertNoCrash,
  closeScene,
  openScene,
  sleep,
  waitFor,
  workerConfig,
  type Scene,
} from './harness.js';
import { completeJsonLines } from '../helpers/json-lines.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/cron-worker.ts', import.meta.url));
// As declared by the fixture.
const SCHEDULE = 'chaos-tick';
const KIND = 'cron_tick';

const KILLS = 7;
const KILL_EVERY_MS = 2_500;

interface CronLine {
  event: string;
  isLeader?: boolean;
  t: number;
  fires?: { fireAt: string; outcome: string; jobId: string | null }[];
}

function linesOf(w: ChaosWorker): CronLine[] {
  return completeJsonLines<CronLine>(w.cfg.log);
}

describe('chaos: the leader firing cron schedules dies, again and again', () => {
  let scene: Scene | undefined;
  const workers: ChaosWorker[] = [];
  /** Replacements still starting (spawned in the background, so the kills keep their pace). */
  const spawning: Promise<unknown>[] = [];
  beforeAll(async () => {
    scene = await openScene('cron_leader');
  });
  afterAll(async () => {
    await Promise.allSettled(spawning);
    await closeScene(scene, workers);
  });

  it(`${KILLS} SIGKILLs of the leader of a per-second schedule: at most one job per fire time, no second lost, fires resume after each failover`, async () => {
    const { db, pool, logs } = scene!;
    let next = 0;
    const spawnOne = () => ChaosWorker.spawn(logs.dir, workerConfig(db.url, `cron-${next++}`), FIXTURE);
    workers.push(...(await Promise.all([spawnOne(), spawnOne(), spawnOne()])));
    const alive = () => workers.filter((w) => w.killedAt === null);
    const leader = () => alive().find((w) => w.isLeader());
    /** Fire times of jobs in the database, as epoch ms. */
    const fireTimes = async (): Promise<number[]> => {
      const { rows } = await pool.query<{ fire_at: string }>(
        `select meta -> 'cron' ->> 'fireAt' as fire_at from awa.ready_entries where kind = $1`,
        [KIND],
      );
      return rows.map((r) => Date.parse(r.fire_at));
    };

    const kills: { at: number; instance: string }[] = [];
    const started = Date.now();
    for (let i = 0; i < KILLS; i++) {
      // A leader that has fired since the last kill (or since the start): the schedule runs.
      const since = kills.at(-1)?.at ?? 0;
      await waitFor(
        `a leader firing after kill ${i}`,
        async () => {
          assertNoCrash(workers);
          return leader() !== undefined && (await fireTimes()).some((t) => t > since);
        },
        15_000,
        50,
      );
      const wait = since + KILL_EVERY_MS - Date.now();
      if (wait > 0) await sleep(wait);
      const victim = leader();
      if (!victim) {
        i--; // leadership moved on its own meanwhile; wait for the new leader to fire
        continue;
      }
      kills.push({ at: await victim.kill(), instance: victim.instanceId });
      spawning.push(spawnOne().then((w) => workers.push(w)));
    }
    const lastKill = kills.at(-1)!.at;
    await waitFor(
      'fires after the last kill',
      async () => (await fireTimes()).some((t) => t > lastKill + 1_000),
      15_000,
      50,
    );
    const elapsed = Date.now() - started;
    await Promise.all(spawning);
    // Stop the survivors gracefully, so no fire is in flight when the database is read.
    await Promise.all(alive().map((w) => w.stop()));
    assertNoCrash(workers);

    const times = await fireTimes();
    const perFireTime = new Map<number, number>();
    for (const t of times) perFireTime.set(t, (perFireTime.get(t) ?? 0) + 1);
    const maxPerFireTime = Math.max(...perFireTime.values());
    const distinct = [...perFireTime.keys()].sort((a, b) => a - b);
    const first = distinct[0]!;
    const last = distinct.at(-1)!;
    const missing: string[] = [];
    for (let t = first; t <= last; t += 1_000)
      if (!perFireTime.has(t)) missing.push(new Date(t).toISOString());
    const resumedAfter = kills.map((k) => distinct.find((t) => t > k.at)! - k.at);
    const leaders = new Set(
      workers
        .filter((w) => linesOf(w).some((l) => l.event === 'leadership' && l.isLeader))
        .map((w) => w.instanceId),
    );
    // From the logs: how long after each kill another process held the leadership.
    const takeoverMs = kills.map(
      (k) =>
        Math.min(
          ...workers.flatMap((w) =>
            linesOf(w)
              .filter((l) => l.event === 'leadership' && l.isLeader && l.t > k.at)
              .map((l) => l.t),
          ),
        ) - k.at,
    );
    const report = {
      elapsedMs: elapsed,
      kills: kills.length,
      leaders: leaders.size,
      fireTimes: distinct.length,
      jobs: times.length,
      maxJobsPerFireTime: maxPerFireTime,
      missingSeconds: missing.length,
      takeoverMs,
      firstFireAfterKillMs: resumedAfter,
    };
    console.log(`[chaos] cron leader kill: ${JSON.stringify(report)}`);

    expect(maxPerFireTime).toBe(1);
    expect(missing).toEqual([]);
    expect(kills).toHaveLength(KILLS);
    // Every kill was of a different process, and each time another took over and fired again.
    expect(new Set(kills.map((k) => k.instance)).size).toBe(KILLS);
    expect(leaders.size).toBeGreaterThanOrEqual(KILLS + 1);
    for (const r of resumedAfter) expect(r).toBeLessThan(10_000);
    // The schedule's row names the last fire and its job.
    const { rows } = await pool.query<{ last_fire_at: Date; last_job: string }>(
      'select last_fire_at, last_job_id::text as last_job from awa.cron_jobs where name = $1',
      [SCHEDULE],
    );
    expect(rows[0]!.last_fire_at.getTime()).toBe(last);
    const { rows: lastJob } = await pool.query<{ fire_at: string }>(
      `select meta -> 'cron' ->> 'fireAt' as fire_at from awa.ready_entries where job_id = $1`,
      [rows[0]!.last_job],
    );
    expect(Date.parse(lastJob[0]!.fire_at)).toBe(last);
    // What the leaders logged as fired is in the database, once (a killed leader may not have logged its
    // last fire, never the other way round).
    const logged = workers.flatMap((w) =>
      linesOf(w).flatMap((l) =>
        (l.fires ?? []).filter((x) => x.outcome === 'fired').map((x) => Date.parse(x.fireAt)),
      ),
    );
    expect(new Set(logged).size).toBe(logged.length);
    for (const t of logged) expect(perFireTime.get(t)).toBe(1);
  }, 90_000);
});
