import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Dispatcher, type DispatcherMode } from '../../src/host/dispatcher.js';
import type { ClaimResult } from '../../src/storage/operations.js';
import { fakeBatch } from '../helpers/claim.js';

// The dispatcher's modes, step by step: each claim is answered by the test, so every step is a known mode and
// a known number of claims. Counts and orders only; the fake clock is moved to the next timer, never by a
// number of milliseconds.

const found = (n: number, start = 1): ClaimResult => ({
  batches: n > 0 ? [fakeBatch(n, start)] : [],
  contended: false,
});

interface Claim {
  max: number;
  answer(result: ClaimResult): void;
  fail(err: Error): void;
}

/** A dispatcher (10 permits, batches of 4, no polling to speak of) whose claims wait for the test. */
function manual() {
  const claims: Claim[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const started: string[] = [];
  const handedBack: string[] = [];
  const errors: unknown[] = [];
  const d = new Dispatcher('q', 10, 4, 3_600_000, 0, {
    claim: (_q, max) =>
      new Promise((resolve, reject) => {
        mostInFlight = Math.max(mostInFlight, ++inFlight);
        const settle = () => inFlight--;
        claims.push({
          max,
          answer: (r) => (settle(), resolve(r)),
          fail: (e) => (settle(), reject(e)),
        });
      }),
    execute: (_q, _b, job) => started.push(job.id),
    handBack: (_q, _b, job) => handedBack.push(job.id),
    backpressure: () => false,
    onError: (e) => errors.push(e),
  });
  const modes: DispatcherMode[] = [d.mode];
  /** Lets the claim loop run, then notes the mode it is in. */
  const step = async () => {
    await vi.advanceTimersByTimeAsync(0);
    modes.push(d.mode);
  };
  const last = () => claims.at(-1)!;
  return {
    d,
    claims,
    started,
    handedBack,
    errors,
    modes,
    step,
    last,
    mostInFlight: () => mostInFlight,
  };
}

describe('Dispatcher modes', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a wake-up while claiming is one more round once the claim returns, never a second claim at once', async () => {
    const t = manual();
    t.d.start();
    await t.step();
    t.d.wake();
    t.d.notified();
    t.d.wake();
    await t.step();
    expect(t.claims).toHaveLength(1);
    // Short, yet woken meanwhile: one more claim (however many wake-ups came), then the queue is dry.
    t.last().answer(found(1));
    await t.step();
    expect(t.claims).toHaveLength(2);
    t.last().answer(found(0));
    await t.step();
    expect(t.modes).toEqual(['stopped', 'claiming', 'claiming', 'claiming', 'waiting']);
    expect(t.mostInFlight()).toBe(1);
    expect(t.started).toEqual(['1']);
    t.d.stopClaiming();
    expect(t.d.mode).toBe('stopped');
  });

  it('a short claim with no wake-up meanwhile ends the loop; a full one claims again at once', async () => {
    const t = manual();
    t.d.start();
    await t.step();
    t.last().answer(found(4, 1));
    await t.step();
    expect(t.claims.map((c) => c.max)).toEqual([4, 4]);
    t.last().answer(found(2, 5));
    await t.step();
    expect(t.modes).toEqual(['stopped', 'claiming', 'claiming', 'waiting']);
    expect(t.claims).toHaveLength(2);
    t.d.stopClaiming();
  });

  it('after a failed claim it backs off, lets wake-ups pass, then claims again', async () => {
    const t = manual();
    t.d.start();
    await t.step();
    t.last().fail(new Error('db down'));
    await t.step();
    expect(t.errors).toHaveLength(1);
    // Wake-ups during the back-off claim nothing.
    t.d.wake();
    await t.step();
    expect(t.claims).toHaveLength(1);
    await vi.advanceTimersToNextTimerAsync();
    t.modes.push(t.d.mode);
    expect(t.claims).toHaveLength(2);
    t.last().answer(found(0));
    await t.step();
    expect(t.modes).toEqual(['stopped', 'claiming', 'backing-off', 'backing-off', 'claiming', 'waiting']);
    expect(t.mostInFlight()).toBe(1);
    t.d.stopClaiming();
  });

  it('backs off while another claimer holds a lane, then claims again without a wake-up', async () => {
    const t = manual();
    t.d.start();
    await t.step();
    t.last().answer({ batches: [fakeBatch(1, 1)], contended: true });
    await t.step();
    await vi.advanceTimersToNextTimerAsync();
    t.modes.push(t.d.mode);
    expect(t.claims).toHaveLength(2);
    t.last().answer(found(0));
    await t.step();
    expect(t.modes).toEqual(['stopped', 'claiming', 'backing-off', 'claiming', 'waiting']);
    t.d.stopClaiming();
  });

  it('stopped while claiming: the claim in flight is handed back, and nothing claims after it', async () => {
    const t = manual();
    t.d.start();
    await t.step();
    t.d.stopClaiming();
    t.modes.push(t.d.mode);
    t.d.wake();
    t.d.notified();
    t.last().answer(found(4));
    await t.step();
    await vi.advanceTimersByTimeAsync(3_600_000 * 2);
    t.d.wake();
    t.d.resume();
    await t.step();
    expect(t.modes).toEqual(['stopped', 'claiming', 'stopping', 'stopped', 'stopped']);
    expect(t.claims).toHaveLength(1);
    expect(t.started).toEqual([]);
    expect(t.handedBack).toEqual(['1', '2', '3', '4']);
  });

  it('stopped while backing off: the retry is called off', async () => {
    const t = manual();
    t.d.start();
    await t.step();
    t.last().fail(new Error('db down'));
    await t.step();
    t.d.stopClaiming();
    t.modes.push(t.d.mode);
    await vi.advanceTimersByTimeAsync(3_600_000 * 2);
    expect(t.modes).toEqual(['stopped', 'claiming', 'backing-off', 'stopped']);
    expect(t.claims).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it.each([
    ['fails', (c: Claim) => c.fail(new Error('db down'))],
    ['meets a busy lane', (c: Claim) => c.answer({ batches: [], contended: true })],
  ])(
    'stopped while claiming, a claim that then %s arms no retry: nothing is left to hold the process open',
    async (_, end) => {
      const t = manual();
      t.d.start();
      await t.step();
      t.d.stopClaiming();
      end(t.last());
      await t.step();
      expect(t.modes).toEqual(['stopped', 'claiming', 'stopped']);
      expect(vi.getTimerCount()).toBe(0);
      // Started again, it claims at the next wake-up, not after a leftover back-off.
      t.d.start();
      await t.step();
      expect(t.d.mode).toBe('claiming');
      expect(t.claims).toHaveLength(2);
      t.last().answer(found(0));
      await t.step();
      t.d.stopClaiming();
    },
  );

  it('resolves idle waiters once no claim is in flight and no job runs, in the order they asked', async () => {
    const t = manual();
    t.d.start();
    await t.step();
    const resolved: string[] = [];
    void t.d.idle().then(() => resolved.push('first'));
    // A claim in flight is not idle, even with no job running.
    await t.step();
    expect(resolved).toEqual([]);
    t.last().answer(found(2));
    await t.step();
    void t.d.idle().then(() => resolved.push('second'));
    t.d.release();
    await t.step();
    expect(resolved).toEqual([]);
    t.d.release();
    await t.step();
    expect(resolved).toEqual(['first', 'second']);
    expect(t.modes).toEqual(['stopped', 'claiming', 'claiming', 'waiting', 'waiting', 'waiting']);
    // Nothing running or in flight: resolves at once.
    await expect(t.d.idle()).resolves.toBeUndefined();
    t.d.stopClaiming();
  });
});
