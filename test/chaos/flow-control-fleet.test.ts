// Chaos: flow control across a fleet (issue 36, item 4). Four host processes (bench/limits/host.ts)
// serve a queue limited to 25 starts/s per key and a queue limited to 3 running attempts per key, each host
// with far more permits than a limit lets one key use. The limits are checked against what the database
// recorded, not against the limits' own bookkeeping: every start is a claim receipt's member (read while the
// run goes, bench/limits/fleet.ts), and running attempts per key are sampled from the jobs view every ~20 ms.
// Then two of the four hosts (each the busiest in the database at that moment) are SIGKILLed mid-run and
// replaced: the leader rescues their attempts, and the limits still hold through the rescues, with every job
// completed and only rescued ones run twice.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countIds, LimitedFleet } from '../../bench/limits/fleet.js';
import { runOnFleet, type PlannedJob, type RunResult } from '../../bench/limits/run.js';
import { maxPerKeyInWindow, roomLeftAtClaims, sustainedOverKeys } from '../../bench/limits/windows.js';
import type { QueueOptions } from '../../src/index.js';
import { closeScene, openScene, sample, type Scene } from './harness.js';

// The figures (100 starts/s per key over 10 keys, kept >= 95% under backlog) are measured by the bench
// (`limits`): how much of its rate a key keeps depends on how soon the hosts claim again when a window opens, a
// matter of the machine's speed (a busy two-core CI machine kept 72-90% at 100/s and 89% at 25/s). What this test
// asserts holds on a machine of any speed: no window ever holds more than the limit, a key's first burst takes
// the whole limit, and every claim gives out all the starts the rate allows: after it, each key with a job not yet
// started has the limit's worth of starts in the window that ends at the claim (roomLeftAtClaims()).
const RATE = { limit: 25, periodMs: 1_000, burst: 25 };
const RATE_KEYS = 10;
const RATE_BACKLOG = 100;
const K = 3;
const KEYS = 1_000;
const PER_KEY = 6;

const QUEUES: Record<'rate' | 'keys', QueueOptions> = {
  // 512 permits a host (a claim asks for at most 512, claimBatchSize): with at most 250 started in any second,
  // every claim asks for more than all the keys' rooms together, so only the rate holds a key back.
  rate: { concurrency: 512, limits: { key: { arg: 'tenant' }, perKey: { rate: RATE } } },
  keys: { concurrency: 100, limits: { key: { arg: 'tenant' }, perKey: { concurrency: K } } },
};

/** RATE_BACKLOG jobs of each of RATE_KEYS keys, the keys interleaved: every key has a backlog from the start. */
const rateJobs = (): PlannedJob[] =>
  Array.from({ length: RATE_KEYS * RATE_BACKLOG }, (_, i) => ({
    queue: 'rate',
    tenant: `r${i % RATE_KEYS}`,
    sleepMs: 3,
  }));

/** PER_KEY jobs of each of KEYS keys, a key's jobs side by side: every claim meets keys with more jobs than K,
 * so the limit, not the hosts' permits, holds a key back. */
const keyJobs = (sleepMs: number): PlannedJob[] =>
  Array.from({ length: KEYS * PER_KEY }, (_, i) => ({
    queue: 'keys',
    tenant: `k${Math.floor(i / PER_KEY)}`,
    sleepMs,
  }));

describe('chaos: flow control across a fleet of four host processes', () => {
  let scene: Scene | undefined;
  let fleet: LimitedFleet | undefined;

  beforeAll(async () => {
    scene = await openScene('limits');
    fleet = new LimitedFleet({
      url: scene.db.url,
      queues: QUEUES,
      sleepMs: 0,
      startLog: 'sync',
      short: true,
      // The ring turns every second, as it does in the chaos suite: receipts are read every 100 ms, long
      // before their slot can be pruned, and a pruned job's end is read from compact history.
      ringIntervalMs: 1_000,
      ringSlotMinRows: 0,
    });
    await fleet.grow(4);
  });
  afterAll(async () => {
    await fleet?.dispose();
    await closeScene(scene, []);
  });

  const run = (jobs: PlannedJob[], killAfterMs: number[] = []) =>
    runOnFleet(fleet!, scene!.client, scene!.db.url, 'awa', {
      jobs,
      killAfterMs,
      timeoutMs: 40_000,
      readStartsEveryMs: 100,
    });

  /**
   * Every job completed, and ran once unless rescued. The receipts record a claim of each attempt, and one more
   * for each time a host handed the job back unstarted (held ahead of a permit past 250 ms: a snooze, no
   * attempt spent, logged by the host): no other start is allowed, but a hand-back a killed host could not log.
   */
  const checkEnds = (r: RunResult) => {
    expect(r.notCompleted).toBe(0);
    const notCompleted = r.ids.filter((id) => r.ends.get(id)?.state !== 'completed');
    expect(sample(notCompleted)).toEqual([]);
    const rescued = fleet!.rescued();
    const handedBack = fleet!.handedBack();
    const dbStarts = countIds(r.starts.starts.map((s) => s.jobId));
    const handlerStarts = countIds(
      fleet!.lines().flatMap((l) => (l.event === 'starts' ? l.starts.map(([id]) => id) : [])),
    );
    // Each job's start is in the receipts read: none missing, none counted twice.
    expect(r.starts.unreadable).toBe(0);
    expect(sample(r.ids.filter((id) => !dbStarts.has(id)))).toEqual([]);
    expect(sample(r.ids.filter((id) => !handlerStarts.has(id)))).toEqual([]);
    // A host SIGKILLed after a hand-back committed but before it wrote the line leaves that receipt member
    // unexplained: allowed only on a killed host, for a member that was not one of the job's rescued attempts.
    const killed = new Set(r.kills.map((k) => k.instance));
    const onKilled = countIds(r.starts.starts.filter((s) => killed.has(s.instance)).map((s) => s.jobId));
    const unexplained = (id: string) =>
      dbStarts.get(id)! - r.ends.get(id)!.attempt - (handedBack.get(id) ?? 0);
    const claimedOtherwise = r.ids.filter(
      (id) =>
        unexplained(id) < 0 ||
        unexplained(id) > Math.max(0, (onKilled.get(id) ?? 0) - (rescued.get(id) ?? 0)),
    );
    expect(sample(claimedOtherwise)).toEqual([]);
    const ranTwice = r.ids.filter((id) => (handlerStarts.get(id) ?? 0) > 1 || r.ends.get(id)!.attempt > 1);
    expect(sample(ranTwice.filter((id) => !rescued.has(id)))).toEqual([]);
    // A rescued job's extra attempts are its rescues, nothing else (a wait at the gate or a hand-back spends no
    // attempt); its errors say so where the job's row is still in the ring (compact history keeps no errors).
    for (const id of ranTwice) {
      const end = r.ends.get(id)!;
      expect(end.attempt).toBe(1 + rescued.get(id)!);
      expect(end.errors.every((e) => e.startsWith('rescued: '))).toBe(true);
    }
    return {
      ranTwice: ranTwice.length,
      handedBack: r.ids.filter((id) => handedBack.has(id)).length,
      unloggedHandBacks: r.ids.filter((id) => unexplained(id) > 0).length,
    };
  };

  const rateFigures = (r: RunResult) => {
    const db = r.starts.byKey('rate');
    const sustained = sustainedOverKeys(db, RATE.periodMs, RATE.limit);
    return {
      db,
      maxDbStartsPerKeyPerSecond: maxPerKeyInWindow(db, RATE.periodMs),
      maxHandlerStartsPerKeyPerSecond: maxPerKeyInWindow(
        fleet!.handlerStarts('rate', new Set(r.ids)),
        RATE.periodMs,
      ),
      sustainedMinPercent: Math.round(sustained.minPercent * 10) / 10,
      sustainedWindows: sustained.windows,
      roomLeft: roomLeftAtClaims(
        r.starts.starts.filter((s) => s.queue === 'rate'),
        new Map(Array.from({ length: RATE_KEYS }, (_, i) => [`r${i}`, RATE_BACKLOG])),
        RATE.periodMs,
        RATE.limit,
      ),
    };
  };

  it('rate 25/s per key over 10 keys: no key starts more than 25 in any 1 s window, every claim gives out all the starts the rate allows, and none is handed back', async () => {
    const r = await run(rateJobs());
    const f = rateFigures(r);
    const { ranTwice, handedBack } = checkEnds(r);
    console.log(
      `[limits] rate: ${JSON.stringify({
        hosts: 4,
        jobs: r.ids.length,
        keys: f.db.size,
        dbStarts: r.starts.starts.length,
        maxDbStartsPerKeyPerSecond: f.maxDbStartsPerKeyPerSecond,
        maxHandlerStartsPerKeyPerSecond: f.maxHandlerStartsPerKeyPerSecond,
        sustainedMinPercent: f.sustainedMinPercent,
        sustainedWindows: f.sustainedWindows,
        roomLeft: f.roomLeft.length,
        ranTwice,
        handedBack,
        seconds: r.seconds,
      })}`,
    );
    expect(f.db.size).toBe(RATE_KEYS);
    for (const times of f.db.values()) expect(times.length).toBe(RATE_BACKLOG);
    expect(f.maxDbStartsPerKeyPerSecond).toBeLessThanOrEqual(RATE.limit);
    // The limit binds: a key can start its whole burst in one window.
    expect(f.maxDbStartsPerKeyPerSecond).toBe(RATE.limit);
    // Backlog of 100 at 25/s: every key has at least three whole windows before its last start.
    expect(f.sustainedWindows).toBeGreaterThanOrEqual(3 * RATE_KEYS);
    // No claim left a key with jobs under its limit (the claims that did, and the keys, if any).
    expect(sample(f.roomLeft)).toEqual([]);
    expect(ranTwice).toBe(0);
    // A rated queue's hosts hold nothing ahead of their permits (a held job would start after the window its
    // claim was counted in), so none is handed back.
    expect(handedBack).toBe(0);
    expect(fleet!.errors()).toEqual([]);
  }, 60_000);

  it('3 running per key over 1,000 keys: sampled from the database, no key ever runs more than 3, and some reach 3', async () => {
    const r = await run(keyJobs(40));
    const { ranTwice, handedBack } = checkEnds(r);
    console.log(
      `[limits] keys: ${JSON.stringify({
        hosts: 4,
        jobs: r.ids.length,
        keys: KEYS,
        samples: r.running.samples,
        maxRunningPerKey: r.running.maxPerKey.get('keys') ?? 0,
        maxRunningInQueue: r.running.maxPerQueue.get('keys') ?? 0,
        busiestKeyBySample: r.running.busiestKey.get('keys') ?? {},
        dbStarts: r.starts.starts.length,
        ranTwice,
        handedBack,
        endsFromHistory: r.endsFromHistory,
        seconds: r.seconds,
        jobsPerSec: Math.round(r.ids.length / r.seconds),
      })}`,
    );
    expect(r.running.samples).toBeGreaterThan(20);
    expect(r.running.maxPerKey.get('keys')).toBe(K);
    expect(r.starts.byKey('keys').size).toBe(KEYS);
    expect(ranTwice).toBe(0);
    expect(fleet!.errors()).toEqual([]);
  }, 60_000);

  it('two of the four hosts SIGKILLed mid-run and replaced: neither limit is exceeded through the rescues, nothing is lost', async () => {
    const jobs = [...rateJobs(), ...keyJobs(40)];
    const r = await run(jobs, [1_000, 2_000]);
    const f = rateFigures(r);
    const { ranTwice, handedBack, unloggedHandBacks } = checkEnds(r);
    const rescued = [...fleet!.rescued().keys()];
    console.log(
      `[limits] kills: ${JSON.stringify({
        hosts: 4,
        killed: r.kills.length,
        runningAtKills: r.kills.map((k) => k.runningIds.length),
        jobs: r.ids.length,
        rescued: rescued.length,
        ranTwice,
        handedBack,
        unloggedHandBacks,
        lost: r.notCompleted,
        endsFromHistory: r.endsFromHistory,
        maxDbStartsPerKeyPerSecond: f.maxDbStartsPerKeyPerSecond,
        maxHandlerStartsPerKeyPerSecond: f.maxHandlerStartsPerKeyPerSecond,
        roomLeft: f.roomLeft.length,
        maxRunningPerKey: r.running.maxPerKey.get('keys') ?? 0,
        samples: r.running.samples,
        seconds: r.seconds,
      })}`,
    );
    expect(r.kills).toHaveLength(2);
    expect(r.notCompleted).toBe(0);
    // The kills hit hosts with attempts running, and the leader brought every one of them back: rescued, run
    // again and completed (checkEnds: with one more attempt, its error the rescue's).
    const diedRunning = r.kills.flatMap((k) => k.runningIds);
    expect(diedRunning.length).toBeGreaterThan(0);
    const rescuedSet = new Set(rescued);
    expect(sample(diedRunning.filter((id) => !rescuedSet.has(id)))).toEqual([]);
    for (const id of diedRunning) expect(r.ends.get(id)?.attempt).toBeGreaterThanOrEqual(2);
    expect(ranTwice).toBeGreaterThanOrEqual(diedRunning.length);
    expect(f.maxDbStartsPerKeyPerSecond).toBeLessThanOrEqual(RATE.limit);
    expect(sample(f.roomLeft)).toEqual([]);
    expect(r.running.maxPerKey.get('keys')).toBeLessThanOrEqual(K);
    expect(r.running.maxPerKey.get('keys')).toBe(K);
    for (const times of f.db.values()) expect(times.length).toBeGreaterThanOrEqual(RATE_BACKLOG);
  }, 90_000);
});
