import { trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { CachedRead } from '../../src/telemetry/cached-read.js';
import { ConsumerTelemetry, type HostSettlement } from '../../src/telemetry/consumer.js';
import { ProducerTelemetry } from '../../src/telemetry/producer.js';
import { withTraceMeta } from '../../src/telemetry/trace-context.js';
import type { JobRow } from '../../src/model/enqueue-options.js';
import { createTestSdk, sum } from '../helpers/otel.js';

// The pure parts of the telemetry module, against an SDK meter that is handed in rather than registered
// (so these tests need no global state): the run-length grouping of flushes and sends, the cached read
// behind the queue-health gauges, and the meta splice that carries trace context.

function scope() {
  const sdk = createTestSdk(false);
  return {
    sdk,
    scope: { meter: sdk.meterProvider.getMeter('awa'), tracer: trace.getTracer('unused') },
  };
}

function settlement(
  jobId: string,
  queue: string,
  kind: string,
  outcome: HostSettlement['outcome'],
): HostSettlement {
  return { jobId, queue, kind, outcome, claimSlot: 0, batchId: '1', idx: 1, runLease: 1 };
}

describe('ConsumerTelemetry.flushed', () => {
  it('adds one count per run of equal (queue, kind, outcome, accepted), exact over interleaved results', async () => {
    const { sdk, scope: s } = scope();
    const t = new ConsumerTelemetry(s, new Set(['dq']));
    const items = [
      settlement('1', 'q', 'a', 'completed'),
      settlement('2', 'q', 'a', 'completed'),
      settlement('3', 'q', 'b', 'completed'),
      settlement('4', 'q', 'a', 'failed'),
      settlement('5', 'q', 'a', 'completed'), // rejected by the fence
      settlement('6', 'q', 'a', 'completed'),
      settlement('7', 'dq', 'a', 'failed'),
      settlement('8', 'dq', 'a', 'failed'),
      settlement('9', 'dq', 'a', 'retry'),
    ];
    t.flushed(items, new Set(['1', '2', '3', '4', '6', '7', '8', '9']));
    const settled = (queue: string, kind: string, outcome: string) =>
      sum(sdk.reader, 'awa.job.settled', {
        'messaging.destination.name': queue,
        'awa.job.kind': kind,
        'awa.job.outcome': outcome,
      });
    expect(await settled('q', 'a', 'completed')).toBe(3);
    expect(await settled('q', 'b', 'completed')).toBe(1);
    expect(await settled('q', 'a', 'failed')).toBe(1);
    expect(await settled('dq', 'a', 'failed')).toBe(2);
    expect(await settled('dq', 'a', 'retry')).toBe(1);
    expect(await sum(sdk.reader, 'awa.job.settled')).toBe(8);
    expect(await sum(sdk.reader, 'awa.job.stale', { 'messaging.destination.name': 'q' })).toBe(1);
    // Only failures of a DLQ queue go to the DLQ.
    expect(await sum(sdk.reader, 'awa.dlq.moved')).toBe(2);
    await sdk.shutdown();
  });
});

describe('ProducerTelemetry', () => {
  it('counts sent jobs per (queue, kind) and duplicates apart', async () => {
    const { sdk, scope: s } = scope();
    const t = new ProducerTelemetry(s);
    const row = (queue: string, kind: string) => ({ queue, kind }) as JobRow;
    const rows = [row('q', 'a'), row('q', 'a'), row('r', 'a'), row('q', 'b'), row('q', 'a')];
    const send = t.begin('enqueueMany', null);
    await send.run(async () => send.sent(rows, 2));
    const sent = (queue: string, kind: string) =>
      sum(sdk.reader, 'messaging.client.sent.messages', {
        'messaging.destination.name': queue,
        'awa.job.kind': kind,
      });
    expect(await sent('q', 'a')).toBe(3);
    expect(await sent('r', 'a')).toBe(1);
    expect(await sent('q', 'b')).toBe(1);
    expect(await sum(sdk.reader, 'awa.job.enqueue.duplicates')).toBe(2);
    await sdk.shutdown();
  });
});

describe('CachedRead', () => {
  it('reads once per period, shares a read in flight, and keeps the last value when a read fails', async () => {
    let reads = 0;
    let fail = false;
    const errors: unknown[] = [];
    const cache = new CachedRead(
      async () => {
        reads++;
        if (fail) throw new Error('down');
        return reads;
      },
      60_000,
      0,
      (err) => errors.push(err),
    );
    expect(await Promise.all([cache.get(), cache.get()])).toEqual([1, 1]);
    expect(await cache.get()).toBe(1);
    expect(reads).toBe(1);

    const stale = new CachedRead(
      async () => {
        reads++;
        if (fail) throw new Error('down');
        return reads;
      },
      0,
      -1,
      (err) => errors.push(err),
    );
    expect(await stale.get()).toBe(2);
    fail = true;
    expect(await stale.get()).toBe(2);
    expect(errors.map((e) => (e as Error).message)).toEqual(['down']);
  });
});

describe('withTraceMeta', () => {
  it('adds the carrier beside what meta holds, or makes a meta of it', () => {
    const carrier = JSON.stringify({
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    });
    expect(JSON.parse(withTraceMeta(null, carrier))).toEqual({ trace: JSON.parse(carrier) });
    expect(JSON.parse(withTraceMeta('{"metadata":{"a":1},"tags":["x"]}', carrier))).toEqual({
      metadata: { a: 1 },
      tags: ['x'],
      trace: JSON.parse(carrier),
    });
  });
});
