// The reference model on its own (no database): whatever it is asked, its states stay consistent. The model
// is the yardstick of model-based.test.ts, so it must not be able to drift into a state the queue cannot be in.
import { fc, test } from '@fast-check/vitest';
import { expect } from 'vitest';
import { CALLBACK_ACTIONS, QueueModel, TERMINAL, type CallbackAction, type SettleOutcome } from './model.js';

type Op =
  | { op: 'enqueue'; queue: number; max: number; later: boolean }
  | { op: 'claim'; queue: number; n: number }
  | { op: 'settle'; i: number; outcome: SettleOutcome; due: boolean }
  | { op: 'park' | 'cancel' | 'retry'; i: number }
  | { op: 'callback'; i: number; action: CallbackAction | 'timeout' }
  | { op: 'rescue' | 'promote' | 'clock' | 'pause' | 'resume' }
  | { op: 'limEnqueue'; key: number }
  | { op: 'limClaim'; n: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('limEnqueue' as const), key: fc.nat(2) }),
  fc.record({ op: fc.constant('limClaim' as const), n: fc.integer({ min: 1, max: 4 }) }),
  fc.record({
    op: fc.constant('enqueue' as const),
    queue: fc.nat(1),
    max: fc.integer({ min: 1, max: 3 }),
    later: fc.boolean(),
  }),
  fc.record({ op: fc.constant('claim' as const), queue: fc.nat(1), n: fc.integer({ min: 1, max: 4 }) }),
  fc.record({
    op: fc.constant('settle' as const),
    i: fc.nat(20),
    outcome: fc.constantFrom<SettleOutcome>('completed', 'retry', 'failed', 'cancelled', 'snooze'),
    due: fc.boolean(),
  }),
  fc.record({ op: fc.constantFrom('park' as const, 'cancel' as const, 'retry' as const), i: fc.nat(20) }),
  fc.record({
    op: fc.constant('callback' as const),
    i: fc.nat(20),
    action: fc.constantFrom<CallbackAction | 'timeout'>(...CALLBACK_ACTIONS, 'timeout'),
  }),
  fc.record({
    op: fc.constantFrom(
      'rescue' as const,
      'promote' as const,
      'clock' as const,
      'pause' as const,
      'resume' as const,
    ),
  }),
);

function apply(m: QueueModel, o: Op, ids: { n: number }): void {
  const jobs = [...m.jobs.values()];
  const at = <T>(xs: T[], i: number) => xs[i % Math.max(1, xs.length)];
  switch (o.op) {
    case 'enqueue':
      m.addCommitted({
        id: String(++ids.n),
        queue: m.queues[o.queue]!,
        priority: 2,
        bulk: false,
        maxAttempts: o.max,
        pos: m.takePosition(),
        scheduled: o.later,
        late: false,
      });
      break;
    case 'limEnqueue':
      m.addCommitted({
        id: String(++ids.n),
        queue: 'l',
        priority: 2,
        bulk: false,
        maxAttempts: 2,
        pos: m.takePosition(),
        scheduled: false,
        late: false,
        key: `k${o.key}`,
      });
      break;
    case 'limClaim':
      for (const j of m.claimLimited('l', o.n).started)
        m.claimed(
          { claimSlot: 0, batchId: String(ids.n), idx: 1, jobId: j.id, runLease: j.runLease + 1 },
          'i',
        );
      break;
    case 'claim':
      for (const j of [...m.claimable(m.queues[o.queue]!).values()].flat().slice(0, o.n))
        m.claimed(
          { claimSlot: 0, batchId: String(ids.n), idx: 1, jobId: j.id, runLease: j.runLease + 1 },
          'i',
        );
      break;
    case 'settle': {
      const j = at(m.running(), o.i);
      if (j?.current && m.accepts(j.current)) m.settle(j.current, o.outcome, o.due);
      break;
    }
    case 'park': {
      const j = at(m.running(), o.i);
      if (j?.current) m.park(j.current, `t${j.id}:${j.runLease}`);
      break;
    }
    case 'callback': {
      const j = at(m.parked(), o.i);
      if (j?.token) m.callback(j.token, o.action);
      break;
    }
    case 'cancel':
    case 'retry': {
      const j = at(jobs, o.i);
      if (j) m[o.op](j.id);
      break;
    }
    case 'rescue':
      m.rescue('i');
      break;
    case 'promote':
      m.promote();
      break;
    case 'clock':
      m.advanceClock();
      break;
    case 'pause':
      m.paused.add(m.queues[0]!);
      break;
    case 'resume':
      m.paused.delete(m.queues[0]!);
      break;
  }
}

test.prop([fc.array(opArb, { maxLength: 80 })])('the model stays consistent whatever it is asked', (ops) => {
  // Queue 'l' is limited: one attempt per key, two starts per key (a rate no run outlives), three of the queue.
  const m = new QueueModel(
    ['a', 'b', 'l'],
    new Set(['b']),
    new Map([['l', { keyConcurrency: 1, keyRate: 2, queueConcurrency: 3 }]]),
  );
  const starts = new Map<string, number>();
  const ids = { n: 0 };
  for (const o of ops) {
    apply(m, o, ids);
    for (const j of m.jobs.values()) {
      // Attempts are counted, never more than allowed; each claim raised the run lease.
      expect(j.attempt).toBeGreaterThanOrEqual(0);
      expect(j.attempt).toBeLessThanOrEqual(j.maxAttempts);
      expect(j.runLease).toBeGreaterThanOrEqual(j.attempt);
      // Exactly the running jobs hold an attempt; exactly the parked ones a token.
      expect(j.current !== null).toBe(j.state === 'running');
      expect(j.token !== null).toBe(j.state === 'waiting_external');
      if (j.state === 'dlq') expect(j.queue).toBe('b');
      if (TERMINAL.has(j.state)) expect(j.owner).toBeNull();
      // Only an available job of a limited queue waits at its gate.
      if (j.gated) expect([j.queue, j.state]).toEqual(['l', 'available']);
    }
    // The limited queue's claims keep its limits: a key's running attempts started under them, the queue's,
    // and a key's starts.
    const running = m.running().filter((j) => j.queue === 'l');
    const byKey = new Map<string, number>();
    for (const j of running) byKey.set(j.key, (byKey.get(j.key) ?? 0) + 1);
    for (const n of byKey.values()) expect(n).toBeLessThanOrEqual(1);
    expect(running.length).toBeLessThanOrEqual(3);
    if (o.op === 'limClaim') for (const j of running) starts.set(`${j.id}:${j.runLease}`, 1);
    const perKey = new Map<string, number>();
    for (const k of starts.keys()) {
      const key = m.jobs.get(k.split(':')[0]!)!.key;
      perKey.set(key, (perKey.get(key) ?? 0) + 1);
    }
    for (const n of perKey.values()) expect(n).toBeLessThanOrEqual(2);
  }
});
