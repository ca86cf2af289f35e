import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Dispatcher } from '../../src/host/dispatcher.js';
import type { ClaimBatch } from '../../src/storage/operations.js';
import { until } from '../helpers/wait.js';
import { fakeBatch } from '../helpers/claim.js';

describe('Dispatcher', () => {
  it('claims only as many jobs as it has free permits, and claims again while batches come back full', async () => {
    let available = 25;
    const asks: number[] = [];
    const running: string[] = [];
    const d = new Dispatcher('q', 10, 4, 60_000, 0, {
      claim: async (_q, max) => {
        asks.push(max);
        const n = Math.min(max, available);
        available -= n;
        return { batches: n > 0 ? [fakeBatch(n, 100 - available)] : [], contended: false };
      },
      execute: (_q, _b, job) => running.push(job.id),
      handBack: () => {
        throw new Error('nothing is held without prefetch');
      },
      backpressure: () => false,
      onError: (e) => {
        throw e;
      },
    });
    d.start();
    await new Promise((r) => setTimeout(r, 10));
    // 10 permits, batches of 4: 4 + 4 + 2, then no permit left, so no further claim.
    expect(asks).toEqual([4, 4, 2]);
    expect(d.running).toBe(10);
    // Freed permits wake the claim loop; it never asks for more than it has free.
    for (let i = 0; i < 10; i++) d.release();
    await new Promise((r) => setTimeout(r, 10));
    expect(asks.slice(3).reduce((a, b) => a + b, 0)).toBe(10);
    expect(asks.every((n) => n <= 4)).toBe(true);
    expect(running).toHaveLength(20);
    expect(d.running).toBe(10);
    d.stopClaiming();
  });

  describe('after a failed claim', () => {
    beforeEach(() => {
      vi.useFakeTimers();
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    it('retries only once its backoff has passed, doubling it up to 5 s, and starts again at 100 ms after a success', async () => {
      const errors: unknown[] = [];
      let calls = 0;
      let failing = true;
      const d = new Dispatcher('q', 5, 5, 3_600_000, 0, {
        claim: async () => {
          calls++;
          if (failing) throw new Error(`db down ${calls}`);
          return { batches: [], contended: false };
        },
        execute: () => {},
        handBack: () => {
          throw new Error('nothing is held without prefetch');
        },
        backpressure: () => false,
        onError: (e) => errors.push(e),
      });
      d.start();
      await vi.advanceTimersByTimeAsync(0);
      expect(calls).toBe(1);
      expect(errors).toHaveLength(1);
      expect(d.running).toBe(0);

      // Each retry comes exactly when its backoff has passed, not a millisecond before; a wake-up
      // (notification, freed permit) during the backoff does not cut it short.
      const delays = [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000];
      for (const [i, delay] of delays.entries()) {
        await vi.advanceTimersByTimeAsync(delay - 1);
        d.wake();
        await vi.advanceTimersByTimeAsync(0);
        expect({ retry: i, calls }).toEqual({ retry: i, calls: i + 1 });
        await vi.advanceTimersByTimeAsync(1);
        expect({ retry: i, calls }).toEqual({ retry: i, calls: i + 2 });
      }
      expect(errors).toHaveLength(delays.length + 1);
      expect((errors.at(-1) as Error).message).toBe(`db down ${delays.length + 1}`);

      // The database is back: the next retry succeeds, and a later failure backs off from 100 ms again.
      failing = false;
      await vi.advanceTimersByTimeAsync(5_000);
      const afterRecovery = calls;
      expect(errors).toHaveLength(delays.length + 1);
      failing = true;
      d.wake();
      await vi.advanceTimersByTimeAsync(0);
      expect(calls).toBe(afterRecovery + 1);
      await vi.advanceTimersByTimeAsync(99);
      expect(calls).toBe(afterRecovery + 1);
      await vi.advanceTimersByTimeAsync(1);
      expect(calls).toBe(afterRecovery + 2);
      expect(d.running).toBe(0);

      // stopClaiming cancels a pending retry.
      d.stopClaiming();
      await vi.advanceTimersByTimeAsync(10_000);
      expect(calls).toBe(afterRecovery + 2);
    });
  });

  describe('when another claimer held a lane', () => {
    beforeEach(() => {
      vi.useFakeTimers();
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    it('claims again after 2 ms, doubling while the lane stays held, and waits for a wake-up once a short claim was not contended', async () => {
      const asks: number[] = [];
      let contendedClaims = 3;
      const d = new Dispatcher('q', 10, 10, 3_600_000, 0, {
        claim: async (_q, max) => {
          asks.push(max);
          // Another host holds the lane: one job of the free lane, and the flag.
          if (contendedClaims-- > 0) return { batches: [fakeBatch(1, asks.length * 10)], contended: true };
          if (contendedClaims === -1) return { batches: [fakeBatch(2, 900)], contended: false };
          return { batches: [], contended: false };
        },
        execute: () => {},
        handBack: () => {
          throw new Error('nothing is held without prefetch');
        },
        backpressure: () => false,
        onError: (e) => {
          throw e;
        },
      });
      d.start();
      await vi.advanceTimersByTimeAsync(0);
      expect(asks).toEqual([10]);
      // Retries at +2 ms, then +4 ms, then +8 ms; no notification needed.
      await vi.advanceTimersByTimeAsync(1);
      expect(asks).toHaveLength(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(asks).toEqual([10, 9]);
      await vi.advanceTimersByTimeAsync(3);
      expect(asks).toHaveLength(2);
      await vi.advanceTimersByTimeAsync(1);
      expect(asks).toEqual([10, 9, 8]);
      await vi.advanceTimersByTimeAsync(8);
      // The fourth claim was short but not contended; it found jobs, so one more look 5 ms later, which
      // finds none: the queue is dry, so no more claims on a timer.
      expect(asks).toEqual([10, 9, 8, 7]);
      await vi.advanceTimersByTimeAsync(4);
      expect(asks).toHaveLength(4);
      await vi.advanceTimersByTimeAsync(1);
      expect(asks).toEqual([10, 9, 8, 7, 5]);
      expect(d.running).toBe(5);
      await vi.advanceTimersByTimeAsync(10_000);
      expect(asks).toHaveLength(5);
      d.stopClaiming();
    });
  });

  describe('while jobs trickle in', () => {
    beforeEach(() => {
      vi.useFakeTimers();
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    it('claims again every 5 ms while claims keep finding jobs, and stops after the first that finds none', async () => {
      const at: number[] = [];
      let trickle = 3;
      const t0 = Date.now();
      const d = new Dispatcher('q', 100, 50, 3_600_000, 0, {
        claim: async () => {
          at.push(Date.now() - t0);
          return { batches: trickle-- > 0 ? [fakeBatch(1, at.length)] : [], contended: false };
        },
        execute: () => {},
        handBack: () => {
          throw new Error('nothing is held without prefetch');
        },
        backpressure: () => false,
        onError: (e) => {
          throw e;
        },
      });
      d.start();
      await vi.advanceTimersByTimeAsync(100);
      // Three claims that each found a job, then one that found none; no notification, no poll.
      expect(at).toEqual([0, 5, 10, 15]);
      await vi.advanceTimersByTimeAsync(10_000);
      expect(at).toHaveLength(4);
      // A wake-up from a producer: a claim now and two echoes 5 ms apart, even when they find nothing
      // (producers that skipped their own wake-up may commit just after the first echo); then nothing.
      const woken = Date.now() - t0;
      d.notified();
      await vi.advanceTimersByTimeAsync(100);
      expect(at.slice(4).map((t) => t - woken)).toEqual([0, 5, 10]);
      await vi.advanceTimersByTimeAsync(10_000);
      expect(at).toHaveLength(7);
      d.stopClaiming();
    });
  });

  describe('with a backlog', () => {
    beforeEach(() => {
      vi.useFakeTimers();
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    /** A started dispatcher on a queue whose every claim comes back full, and its claims (size, when). */
    const onBacklog = (concurrency: number, batchSize: number) => {
      const asks: { max: number; at: number }[] = [];
      const t0 = Date.now();
      const d = new Dispatcher('q', concurrency, batchSize, 3_600_000, 0, {
        claim: async (_q, max) => {
          asks.push({ max, at: Date.now() - t0 });
          return { batches: [fakeBatch(max, asks.length * 1000)], contended: false };
        },
        execute: () => {},
        handBack: () => {
          throw new Error('nothing is held without prefetch');
        },
        backpressure: () => false,
        onError: (e) => {
          throw e;
        },
      });
      d.start();
      return { d, asks };
    };

    it('with no more permits than a batch: claims a full batch as soon as its permits are free, a partial one only after 2 ms', async () => {
      const { d, asks } = onBacklog(40, 40);
      await vi.advanceTimersByTimeAsync(0);
      // 40 permits, batches of 40: one claim, then none free.
      expect(asks.map((a) => a.max)).toEqual([40]);
      // A quarter of a batch (10) comes back: no claim yet, it waits for more.
      for (let i = 0; i < 12; i++) d.release();
      await vi.advanceTimersByTimeAsync(1);
      expect(asks).toHaveLength(1);
      // More comes back within the window: still one claim, for everything free, when the window ends.
      for (let i = 0; i < 8; i++) d.release();
      await vi.advanceTimersByTimeAsync(1);
      expect(asks.slice(1)).toEqual([{ max: 20, at: 2 }]);
      // A full batch coming back claims at once, without waiting out the window.
      for (let i = 0; i < 40; i++) d.release();
      await vi.advanceTimersByTimeAsync(0);
      expect(asks.slice(2)).toEqual([{ max: 40, at: 2 }]);
      // Fewer than a quarter free: no claim at all, however long it waits.
      for (let i = 0; i < 9; i++) d.release();
      await vi.advanceTimersByTimeAsync(1_000);
      expect(asks).toHaveLength(3);
      d.stopClaiming();
    });

    it('with more permits than a batch: claims as soon as a quarter of a batch is free', async () => {
      const { d, asks } = onBacklog(100, 40);
      await vi.advanceTimersByTimeAsync(0);
      expect(asks.map((a) => a.max)).toEqual([40, 40, 20]);
      for (let i = 0; i < 10; i++) d.release();
      await vi.advanceTimersByTimeAsync(0);
      expect(asks.slice(3)).toEqual([{ max: 10, at: 0 }]);
      d.stopClaiming();
    });
  });

  it('does not claim under backpressure, and resumes when results are flushed', async () => {
    let pressure = true;
    const asks: number[] = [];
    const running: string[] = [];
    let available = 6;
    const d = new Dispatcher('q', 10, 4, 3_600_000, 0, {
      claim: async (_q, max) => {
        asks.push(max);
        const n = Math.min(max, available);
        available -= n;
        return { batches: n > 0 ? [fakeBatch(n, 100 - available)] : [], contended: false };
      },
      execute: (_q, _b, job) => running.push(job.id),
      handBack: () => {
        throw new Error('nothing is held without prefetch');
      },
      backpressure: () => pressure,
      onError: (e) => {
        throw e;
      },
    });
    d.start();
    await new Promise((r) => setTimeout(r, 10));
    // Free permits and a wake-up, yet no claim: results are piling up.
    expect(asks).toEqual([]);
    d.wake();
    await new Promise((r) => setTimeout(r, 10));
    expect(asks).toEqual([]);
    // Still under pressure: a flush that does not relieve it claims nothing either.
    d.resume();
    await new Promise((r) => setTimeout(r, 10));
    expect(asks).toEqual([]);
    // Pressure gone: resume() claims, batch after batch while they come back full.
    pressure = false;
    d.resume();
    // The second batch came back short: one more look a few ms later finds nothing. (Waited for, not slept
    // on: on a busy machine the echo's timer can fire well after its 5 ms.)
    await until('the echo claim', async () => asks.length >= 3, 5_000, 2);
    expect(asks).toEqual([4, 4, 4]);
    expect(running).toHaveLength(6);
    expect(d.running).toBe(6);
    // The queue ran dry: a later flush does not claim for nothing.
    d.resume();
    await new Promise((r) => setTimeout(r, 10));
    expect(asks).toEqual([4, 4, 4]);
    d.stopClaiming();
  });

  describe('claiming ahead of free permits', () => {
    beforeEach(() => {
      vi.useFakeTimers();
    });
    afterEach(() => {
      vi.useRealTimers();
    });

    /** A started dispatcher on a backlog (every claim comes back full, ids in claim order) that records what
     * it starts and hands back; `finish(n)` releases the n oldest running jobs. Each claim says the queue is
     * rate-limited as `rate.limited` is at the time. */
    const aheadOnBacklog = (
      concurrency: number,
      batchSize: number,
      prefetch: number,
      rate: { limited?: boolean } = {},
    ) => {
      const asks: number[] = [];
      /** Jobs running or held when each claim was made. */
      const occupied: number[] = [];
      const started: number[] = [];
      const handedBack: number[] = [];
      let next = 1;
      let finished = 0;
      const d = new Dispatcher('q', concurrency, batchSize, 3_600_000, prefetch, {
        claim: async (_q, max) => {
          asks.push(max);
          occupied.push(d.running + d.held);
          const batch = fakeBatch(max, next);
          next += max;
          return {
            batches: [batch],
            contended: false,
            ...(rate.limited === undefined ? {} : { rateLimited: rate.limited }),
          };
        },
        execute: (_q, _b, job) => started.push(Number(job.id)),
        handBack: (_q, _b, job) => handedBack.push(Number(job.id)),
        backpressure: () => false,
        onError: (e) => {
          throw e;
        },
      });
      const finish = (n: number) => {
        for (let i = 0; i < n; i++) {
          expect(finished).toBeLessThan(started.length);
          finished++;
          d.release();
        }
      };
      d.start();
      return { d, asks, occupied, started, handedBack, finish };
    };

    /** Runs the queue at `perMs` jobs a millisecond for `ms`, always finishing the oldest running jobs. */
    const runAt = async (finish: (n: number) => void, perMs: number, ms: number) => {
      for (let t = 0; t < ms; t++) {
        finish(perMs);
        await vi.advanceTimersByTimeAsync(1);
      }
    };

    /** 10 permits, up to 10 held, after 120 ms at 5 jobs a millisecond: holding some (checked). */
    const holdingAhead = async () => {
      const ahead = aheadOnBacklog(10, 40, 10);
      await vi.advanceTimersByTimeAsync(0);
      await runAt(ahead.finish, 5, 120);
      expect(ahead.d.held).toBeGreaterThan(0);
      return ahead;
    };

    it('holds ahead only once it has a pace, never runs more than its permits, and starts in claim order', async () => {
      const { d, asks, started, finish } = aheadOnBacklog(10, 40, 10);
      await vi.advanceTimersByTimeAsync(0);
      // No pace yet: a claim for the free permits only.
      expect(asks).toEqual([10]);
      expect(d.held).toBe(0);
      // 5 jobs a millisecond: 20 ms of that pace is 100 jobs, more than the 10 it may hold.
      await runAt(finish, 5, 120);
      expect(asks.some((n) => n > 10)).toBe(true);
      expect(Math.max(...asks)).toBe(20);
      expect(d.running).toBe(10);
      expect(d.held).toBeGreaterThan(0);
      expect(d.held).toBeLessThanOrEqual(10);
      // Every job started once, in the order claimed.
      expect(started).toEqual(Array.from({ length: started.length }, (_, i) => i + 1));
      d.stopClaiming();
    });

    it('holds nothing for handlers slower than its horizon', async () => {
      const { d, asks, occupied, finish } = aheadOnBacklog(10, 40, 10);
      await vi.advanceTimersByTimeAsync(0);
      // One job every 10 ms: 20 ms of that pace is 2 jobs, so claims are for the freed permits plus 2 at most.
      for (let t = 0; t < 40; t++) {
        finish(1);
        await vi.advanceTimersByTimeAsync(10);
      }
      expect(Math.max(...asks)).toBeLessThanOrEqual(12);
      expect(d.running).toBe(10);
      // At one job every 50 ms nothing is held at all.
      for (let t = 0; t < 20; t++) {
        finish(1);
        await vi.advanceTimersByTimeAsync(50);
      }
      const late = asks.length;
      for (let t = 0; t < 10; t++) {
        finish(1);
        await vi.advanceTimersByTimeAsync(50);
      }
      // Claims only for free permits: what each asked for fits beside what was running.
      expect(asks.length).toBeGreaterThan(late);
      expect(asks.slice(late).every((n, i) => n + occupied[late + i]! <= 10)).toBe(true);
      expect(d.held).toBe(0);
      d.stopClaiming();
    });

    it('with prefetch 0 never holds, at any pace', async () => {
      const { d, asks, finish } = aheadOnBacklog(10, 40, 0);
      await vi.advanceTimersByTimeAsync(0);
      await runAt(finish, 5, 120);
      expect(Math.max(...asks)).toBe(10);
      expect(d.held).toBe(0);
      d.stopClaiming();
    });

    it('holds nothing while its claims say the queue has a rate, and holds again once the rate is lifted', async () => {
      const rate = { limited: true };
      const { d, asks, occupied, finish } = aheadOnBacklog(10, 40, 10, rate);
      await vi.advanceTimersByTimeAsync(0);
      // The pace that holds ahead above (5 jobs a millisecond): under a rate, every claim fits the free permits.
      await runAt(finish, 5, 120);
      expect(asks.length).toBeGreaterThan(20);
      expect(asks.every((n, i) => n + occupied[i]! <= 10)).toBe(true);
      expect(d.held).toBe(0);
      rate.limited = false;
      const lifted = asks.length;
      await runAt(finish, 5, 120);
      expect(asks.slice(lifted).some((n, i) => n + occupied[lifted + i]! > 10)).toBe(true);
      expect(d.held).toBeGreaterThan(0);
      d.stopClaiming();
    });

    /** 10 permits, batches of 40, on a backlog whose claims each take `claimMs` (a limited queue's claims wait
     * their turn) and whose handlers each take `handlerMs`: what each claim asked for, with what ran or was held
     * when it was made, and what was held when each claim came back. */
    const waitingTurns = async (prefetch: number, claimMs: number, handlerMs: number, ms: number) => {
      const asks: number[] = [];
      const occupied: number[] = [];
      const heldOnReturn: number[] = [];
      const started: number[] = [];
      const handedBack: number[] = [];
      let next = 1;
      const d = new Dispatcher('q', 10, 40, 3_600_000, prefetch, {
        claim: (_q, max) => {
          asks.push(max);
          occupied.push(d.running + d.held);
          const batch = fakeBatch(max, next);
          next += max;
          return new Promise((resolve) =>
            setTimeout(() => {
              resolve({ batches: [batch], contended: false });
              // Read once the claim's jobs were taken (started or held).
              void Promise.resolve().then(() => heldOnReturn.push(d.held));
            }, claimMs),
          );
        },
        execute: (_q, _b, job) => {
          started.push(Number(job.id));
          setTimeout(() => d.release(), handlerMs);
        },
        handBack: (_q, _b, job) => handedBack.push(Number(job.id)),
        backpressure: () => false,
        onError: (e) => {
          throw e;
        },
      });
      d.start();
      await vi.advanceTimersByTimeAsync(ms);
      d.stopClaiming();
      return { asks, occupied, heldOnReturn, started, handedBack };
    };

    it('while its claims wait their turn longer than its handlers run, asks for the permits that free meanwhile', async () => {
      const { asks, occupied, heldOnReturn, started, handedBack } = await waitingTurns(10, 50, 5, 1_000);
      // The first claim finds nothing running: it asks for its free permits only.
      expect(asks[0]).toBe(10);
      expect(occupied[0]).toBe(0);
      // Once a claim came back to permits that emptied while it waited, the next one is made as soon as the
      // last one's jobs start, all permits busy, for as many again: they will be free when its turn comes.
      const ahead = asks.flatMap((n, i) => (occupied[i] === 10 ? [n] : []));
      expect(ahead.length).toBeGreaterThan(10);
      expect(ahead.slice(1).every((n) => n === 10)).toBe(true);
      // Those jobs start as their claim comes back: nothing is held past it, nothing handed back.
      expect(heldOnReturn.every((h) => h === 0)).toBe(true);
      expect(handedBack).toEqual([]);
      // About ten jobs every claim turn (50 ms), not every turn and a handler's run (55 ms), in claim order.
      expect(started.length).toBeGreaterThanOrEqual(190);
      expect(started).toEqual(Array.from({ length: started.length }, (_, i) => i + 1));
    });

    it('asks for no more than its free permits when its handlers outlast its claims, or with prefetch 0', async () => {
      // Handlers of 200 ms, claims of 20: a claim sees a tenth of the running jobs finish, at most.
      const slow = await waitingTurns(10, 20, 200, 2_000);
      expect(slow.asks.every((n, i) => n + slow.occupied[i]! <= 11)).toBe(true);
      expect(slow.handedBack).toEqual([]);
      const strict = await waitingTurns(0, 50, 5, 1_000);
      expect(strict.asks.every((n, i) => n + strict.occupied[i]! <= 10)).toBe(true);
      expect(strict.heldOnReturn.every((h) => h === 0)).toBe(true);
    });

    it('hands back, unstarted, jobs held 250 ms once its handlers stall, and what it holds when it stops', async () => {
      const { d, started, handedBack, finish } = await holdingAhead();
      const held = d.held;
      const firstHeld = started.length + 1;
      // The handlers stall: nothing finishes. The held jobs wait, then go back after 250 ms, none started.
      await vi.advanceTimersByTimeAsync(200);
      expect(handedBack).toEqual([]);
      await vi.advanceTimersByTimeAsync(60);
      expect(handedBack).toEqual(Array.from({ length: held }, (_, i) => firstHeld + i));
      expect(d.held).toBe(0);
      expect(started.length).toBe(firstHeld - 1);
      // Running again: it holds jobs again, and stopping hands those back at once.
      await runAt(finish, 5, 120);
      const heldAtStop = d.held;
      expect(heldAtStop).toBeGreaterThan(0);
      const before = handedBack.length;
      const startedBefore = started.length;
      const lastStarted = Math.max(...started);
      d.stopClaiming();
      expect(handedBack.slice(before)).toEqual(
        Array.from({ length: heldAtStop }, (_, i) => lastStarted + 1 + i),
      );
      expect(d.held).toBe(0);
      // Its running jobs finish; then it is idle, and nothing more starts.
      let idle = false;
      void d.idle().then(() => (idle = true));
      finish(9);
      await vi.advanceTimersByTimeAsync(0);
      expect(idle).toBe(false);
      finish(1);
      await vi.advanceTimersByTimeAsync(0);
      expect(idle).toBe(true);
      expect(started.length).toBe(startedBefore);
    });

    it('hands back, unstarted, every job of a claim that was in flight when claiming stopped', async () => {
      let answer!: (r: { batches: ClaimBatch[]; contended: boolean }) => void;
      const started: string[] = [];
      const handedBack: string[] = [];
      const d = new Dispatcher('q', 4, 10, 3_600_000, 4, {
        claim: () => new Promise((r) => (answer = r)),
        execute: (_q, _b, job) => started.push(job.id),
        handBack: (_q, _b, job) => handedBack.push(job.id),
        backpressure: () => false,
        onError: (e) => {
          throw e;
        },
      });
      d.start();
      await vi.advanceTimersByTimeAsync(0);
      let idle = false;
      d.stopClaiming();
      void d.idle().then(() => (idle = true));
      await vi.advanceTimersByTimeAsync(0);
      expect(idle).toBe(false);
      answer({ batches: [fakeBatch(4, 1)], contended: false });
      await vi.advanceTimersByTimeAsync(0);
      expect(started).toEqual([]);
      expect(handedBack).toEqual(['1', '2', '3', '4']);
      expect(d.running + d.held).toBe(0);
      expect(idle).toBe(true);
    });

    it('after its thread stood still past 250 ms, hands back held jobs when a permit frees instead of starting them', async () => {
      const { d, started, handedBack, finish } = await holdingAhead();
      const held = d.held;
      const lastStarted = Math.max(...started);
      // The clock moves on while no timer runs (the event loop was blocked, or the process stopped).
      vi.setSystemTime(Date.now() + 300);
      finish(1);
      expect(handedBack).toEqual(Array.from({ length: held }, (_, i) => lastStarted + 1 + i));
      expect(Math.max(...started)).toBe(lastStarted);
      d.stopClaiming();
    });

    it('drops a held job closed elsewhere, and only that attempt', async () => {
      const { d, started, finish } = await holdingAhead();
      expect(d.held).toBeGreaterThan(1);
      const target = String(started.length + 2);
      expect(d.forget(target, 2)).toBeNull();
      const dropped = d.forget(target, 1);
      expect(dropped?.job.id).toBe(target);
      expect(d.forget(target, 1)).toBeNull();
      await runAt(finish, 5, 40);
      expect(started).not.toContain(Number(target));
      expect(started).toContain(Number(target) + 1);
      d.stopClaiming();
    });
  });
});
