import { describe, expect, it } from 'vitest';
import { ClaimWait, HeldJobs, Pace } from '../../src/host/claim-ahead.js';
import type { ClaimBatch, ClaimedJob } from '../../src/storage/operations.js';

// The parts of claiming ahead that keep state: the pace a dispatcher may hold ahead for, what it expects to
// finish while a claim is in flight, and the held jobs.

const batch: ClaimBatch = { batchId: '1', claimSlot: 0, jobs: [] };
const job = (id: number, runLease = 1): ClaimedJob => ({
  idx: id,
  id: String(id),
  kind: 'k',
  args: {},
  attempt: 1,
  maxAttempts: 1,
  runLease,
  priority: 2,
  enqueuedAtMs: 0,
  readyAtMs: 0,
  meta: null,
});

describe('Pace', () => {
  it('is nothing before a window of finishes, then the finishes per ms: a slower window replaces it, a faster one is averaged in', () => {
    const pace = new Pace();
    expect(pace.perMs(1_000)).toBe(0);
    // 2 jobs a ms for 50 ms: the first window closes at 2 per ms.
    for (let t = 1_000; t <= 1_050; t += 0.5) pace.finished(t);
    expect(pace.perMs(1_050)).toBeCloseTo(2, 1);
    // 1 job a ms for the next 50 ms: slower, so 1.
    for (let t = 1_051; t <= 1_100; t++) pace.finished(t);
    expect(pace.perMs(1_100)).toBeCloseTo(1, 1);
    // 3 jobs a ms for the next 50: faster, averaged in, 2.
    for (let i = 1; i <= 151; i++) pace.finished(1_100 + i / 3);
    expect(pace.perMs(1_151)).toBeCloseTo(2, 1);
  });

  it('drops within a window when nothing finishes: a stall stops the claiming ahead', () => {
    const pace = new Pace();
    for (let t = 0; t <= 100; t += 0.25) pace.finished(1_000 + t);
    const steady = pace.perMs(1_100);
    expect(steady).toBeGreaterThan(3);
    // Within the current window the last figure stands; past it, what the window saw (nothing) caps it.
    expect(pace.perMs(1_140)).toBe(steady);
    expect(pace.perMs(1_160)).toBe(0);
    // One job in the 50 ms since: the window closes at 0.02 per ms, and that is the pace, not the old one.
    pace.finished(1_150);
    expect(pace.perMs(1_150)).toBeCloseTo(0.02, 3);
    expect(pace.perMs(1_190)).toBeCloseTo(0.02, 3);
  });

  it('drops to nothing a window after the last finish, however busy the window was before the stall', () => {
    const pace = new Pace();
    for (let t = 0; t <= 50; t += 0.25) pace.finished(1_000 + t);
    // A new window opens at 1,050; 4 jobs a ms finish in its first 40 ms (160 of them), then nothing.
    for (let t = 0.25; t <= 40; t += 0.25) pace.finished(1_050 + t);
    expect(pace.perMs(1_090)).toBeGreaterThan(3);
    // Within a window of the last finish, what the open window saw caps it (160 in 90 ms); past it, none
    // (160 finishes over 300 ms would otherwise still read as half a job a ms, ten jobs held at a 20 ms
    // horizon, and the pace would take seconds to fall to nothing).
    expect(pace.perMs(1_140)).toBeCloseTo(160 / 90, 3);
    expect(pace.perMs(1_141)).toBe(0);
    expect(pace.perMs(1_350)).toBe(0);
    // The next finish closes the window, and its rate (161 in 310 ms) is the pace again.
    pace.finished(1_360);
    expect(pace.perMs(1_360)).toBeCloseTo(161 / 310, 3);
  });
});

describe('HeldJobs', () => {
  it('gives jobs back oldest first, by age, all at once, or one attempt by id and run lease', () => {
    const held = new HeldJobs();
    for (let i = 1; i <= 6; i++) held.push(batch, job(i), 100 + i * 10);
    expect(held.size).toBe(6);
    expect(held.oldestMs()).toBe(110);
    expect(held.shift()?.job.id).toBe('1');
    // Held before 135: jobs 2 and 3 (held at 120 and 130).
    expect(held.takeHeldBefore(135).map((h) => h.job.id)).toEqual(['2', '3']);
    expect(held.remove('5', 2)).toBeNull();
    expect(held.remove('5', 1)?.job.id).toBe('5');
    expect(held.remove('5', 1)).toBeNull();
    expect(held.size).toBe(2);
    expect(held.takeAll().map((h) => h.job.id)).toEqual(['4', '6']);
    expect(held.size).toBe(0);
    expect(held.oldestMs()).toBeNull();
    expect(held.shift()).toBeUndefined();
    // Emptied by shifting, it starts afresh.
    held.push(batch, job(7), 500);
    expect(held.shift()?.job.id).toBe('7');
    expect(held.size).toBe(0);
    held.push(batch, job(8), 600);
    expect(held.oldestMs()).toBe(600);
  });
});

describe('HeldJobs ahead', () => {
  it("holds a live lane's jobs ahead of held bulk jobs, in their own order, keeping the oldest first for the hand-back", () => {
    const bulk: ClaimBatch = { batchId: '2', claimSlot: 0, jobs: [], bulk: true };
    const live: ClaimBatch = { batchId: '3', claimSlot: 0, jobs: [], bulk: false };
    const held = new HeldJobs();
    held.push(bulk, job(1), 100);
    held.push(bulk, job(2), 110);
    held.pushAhead(live, job(3), 120);
    held.pushAhead(live, job(4), 130);
    held.push(bulk, job(5), 140);
    // Live jobs first (in the order they came), then the bulk ones; the live ones took the older bulk time.
    const order = held.takeAll();
    expect(order.map((h) => h.job.id)).toEqual(['3', '4', '1', '2', '5']);
    expect(order.map((h) => h.heldAtMs)).toEqual([100, 100, 100, 110, 140]);
    // With nothing bulk held, a live job simply joins the end.
    held.pushAhead(live, job(6), 200);
    expect(held.oldestMs()).toBe(200);
    expect(held.takeHeldBefore(201).map((h) => h.job.id)).toEqual(['6']);
  });
});

describe('ClaimWait', () => {
  /** `jobs` jobs of `handlerMs` each, `running` at a time without a break, one claim of `claimMs` observed;
   * `now` is when the last of them started. */
  const steady = (jobs: number, running: number, handlerMs: number, claimMs: number) => {
    const wait = new ClaimWait();
    wait.claimed(claimMs);
    let now = 0;
    for (let i = 0; i < running; i++) wait.started(0);
    for (let i = 0; i < jobs - running; i++) {
      // The oldest running job ends and the next one starts at once: `running` are always in flight.
      now = handlerMs * (Math.floor(i / running) + 1);
      wait.finished(now);
      wait.started(now);
    }
    return { wait, now };
  };

  it('expects nothing until a handler has finished', () => {
    const wait = new ClaimWait();
    wait.claimed(50);
    wait.started(0);
    expect(wait.expected(10, 1)).toBe(0);
    wait.finished(5);
    expect(wait.expected(10, 6)).toBe(10);
  });

  it('expects every running job to finish when claims take longer than handlers run, else their share', () => {
    const expect10 = (w: ReturnType<typeof steady>, running = 10) => w.wait.expected(running, w.now);
    expect(expect10(steady(1_000, 10, 5, 50))).toBe(10);
    expect(expect10(steady(1_000, 10, 200, 20))).toBe(1);
    expect(expect10(steady(1_000, 10, 40, 20), 250)).toBe(125);
    expect(expect10(steady(1_000, 10, 5, 50), 0)).toBe(0);
  });

  it('expects nothing while its handlers stall, but does after a quiet spell that only waited for a claim', () => {
    const { wait, now } = steady(1_000, 10, 5, 50);
    // Nothing has finished for 40 ms: within a window, still a pace.
    expect(wait.expected(10, now + 40)).toBe(10);
    // Nothing for 60 ms while the jobs running began 60 ms ago: stalled.
    expect(wait.expected(10, now + 60)).toBe(0);
    // The running jobs all finish at once, then nothing for 80 ms (a claim waiting its turn), then 10 start: they
    // only just began, so it expects them to finish while the next claim waits.
    for (let i = 0; i < 10; i++) wait.finished(now + 5);
    for (let i = 0; i < 10; i++) wait.started(now + 85);
    expect(wait.expected(10, now + 85)).toBe(10);
  });

  it('matches each end with the oldest start still open, however long jobs run without a break', () => {
    // A job starts every millisecond and runs 7 ms, 200,000 of them: never fewer than 7 running, so the starts
    // already matched are dropped on the way. Every end must still meet its own start (a start off by one would
    // make runs of 6 or 8 ms): a claim of 3.5 ms then expects exactly half of 100 running jobs to finish.
    const wait = new ClaimWait();
    wait.claimed(3.5);
    for (let t = 0; t < 200_000; t++) {
      if (t >= 7) wait.finished(t);
      wait.started(t);
    }
    expect(wait.expected(100, 200_000)).toBe(50);
  });
});
