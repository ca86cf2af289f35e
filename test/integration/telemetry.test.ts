import { SpanKind, trace } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  defineJob,
  FailJob,
  RetryAfter,
  WorkerHost,
  type RescuedAttempt,
  type WorkerOptions,
} from '../../src/index.js';
import { createTestDatabase } from '../helpers/database.js';
import { QUICK_HOST } from '../helpers/host-database.js';
import { createTestSdk, histogramCount, points, spansNamed, sum, type TestSdk } from '../helpers/otel.js';

// OpenTelemetry with a real SDK registered (in-memory exporters, a reader collected on demand) against a real
// database: exact counts for what the host and client did, and the trace context carried from the enqueueing
// span into the job's execution span. Every test uses its own queue and filters metrics by it; the SDK is
// registered before any client or host is built (they take the meter when constructed).

const Q = 'messaging.destination.name';
const KIND = 'awa.job.kind';
const OUTCOME = 'awa.job.outcome';

let sdk: TestSdk;
let db: Awaited<ReturnType<typeof createTestDatabase>>;
let client: AwaClient;
const running: WorkerHost[] = [];

beforeAll(async () => {
  sdk = createTestSdk(true);
  db = await createTestDatabase('telemetry');
  client = new AwaClient({ connectionString: db.url });
  await client.migrate();
});

afterEach(async () => {
  await Promise.all(running.splice(0).map((h) => h.stop()));
});

afterAll(async () => {
  await Promise.all(running.splice(0).map((h) => h.stop()));
  await client?.close();
  await db?.drop();
  await sdk?.shutdown();
});

async function start(queue: string, options: Partial<WorkerOptions> = {}): Promise<WorkerHost> {
  const h = new WorkerHost({ connectionString: db.url, queues: { [queue]: 4 }, ...QUICK_HOST, ...options });
  h.on('error', (err) => {
    throw err;
  });
  return h;
}

async function run(h: WorkerHost): Promise<WorkerHost> {
  running.push(h);
  await h.start();
  return h;
}

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 15_000) {
  const until = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('telemetry with an SDK registered', () => {
  it('counts every job sent, per queue and kind, across enqueue, enqueueMany and copyEnqueue', async () => {
    const a = defineJob<{ i: number }>({ kind: 'tel_send_a', queue: 'tel_send' });
    const b = defineJob<{ i: number }>({ kind: 'tel_send_b', queue: 'tel_send' });
    for (let i = 0; i < 3; i++) await client.enqueue(a, { i });
    await client.enqueueMany([
      { kind: a, args: { i: 10 } },
      { kind: b, args: { i: 11 } },
      { kind: b, args: { i: 12 } },
      { kind: a, args: { i: 13 } },
    ]);
    await client.copyEnqueue(Array.from({ length: 5 }, (_, i) => ({ kind: b, args: { i: 20 + i } })));

    const sent = 'messaging.client.sent.messages';
    expect(await sum(sdk.reader, sent, { [Q]: 'tel_send', [KIND]: 'tel_send_a' })).toBe(5);
    expect(await sum(sdk.reader, sent, { [Q]: 'tel_send', [KIND]: 'tel_send_b' })).toBe(7);
    const duration = 'messaging.client.operation.duration';
    expect(
      await histogramCount(sdk.reader, duration, { 'awa.enqueue.operation': 'enqueue', [Q]: 'tel_send' }),
    ).toBe(3);
    expect(
      await histogramCount(sdk.reader, duration, { 'awa.enqueue.operation': 'enqueueMany', [Q]: 'tel_send' }),
    ).toBe(1);

    // One send span per call, producer kind, named after the queue when the call has one.
    const sends = spansNamed(sdk.spans, 'send tel_send');
    expect(sends.length).toBe(4);
    expect(sends.every((s) => s.kind === SpanKind.PRODUCER)).toBe(true);
    expect(sends.filter((s) => s.attributes['messaging.batch.message_count'] === 4)).toHaveLength(1);
  });

  it('counts claims, executions and settlements exactly: N completed, K failed, R retried once', async () => {
    const N = 6;
    const K = 3;
    const R = 2;
    const kind = defineJob<{ mode: 'ok' | 'fail' | 'retry' }>({
      kind: 'tel_outcomes',
      queue: 'tel_outcomes',
      maxAttempts: 3,
    });
    const h = (await start('tel_outcomes')).register(kind, (job) => {
      if (job.args.mode === 'fail') throw new FailJob('no');
      if (job.args.mode === 'retry' && job.attempt === 1) throw new RetryAfter(10, 'again');
    });
    await client.enqueueMany([
      ...Array.from({ length: N }, () => ({ kind, args: { mode: 'ok' as const } })),
      ...Array.from({ length: K }, () => ({ kind, args: { mode: 'fail' as const } })),
      ...Array.from({ length: R }, () => ({ kind, args: { mode: 'retry' as const } })),
    ]);
    await run(h);
    await waitFor('all settled', () => h.stats.completed === N + R && h.stats.failed === K);

    const job = { [Q]: 'tel_outcomes', [KIND]: 'tel_outcomes' };
    const settled = 'awa.job.settled';
    expect(await sum(sdk.reader, settled, { ...job, [OUTCOME]: 'completed' })).toBe(N + R);
    expect(await sum(sdk.reader, settled, { ...job, [OUTCOME]: 'failed' })).toBe(K);
    expect(await sum(sdk.reader, settled, { ...job, [OUTCOME]: 'retry' })).toBe(R);
    expect(await sum(sdk.reader, 'awa.job.stale', job)).toBe(0);
    const attempts = N + K + 2 * R;
    expect(await sum(sdk.reader, 'messaging.client.consumed.messages', { [Q]: 'tel_outcomes' })).toBe(
      attempts,
    );
    const batches = await sum(sdk.reader, 'awa.claim.batches', { [Q]: 'tel_outcomes' });
    expect(batches).toBeGreaterThanOrEqual(2); // the retries came back in a claim of their own
    expect(batches).toBeLessThanOrEqual(attempts);
    expect(await histogramCount(sdk.reader, 'messaging.process.duration', job)).toBe(attempts);
    expect(
      await histogramCount(sdk.reader, 'messaging.process.duration', { ...job, [OUTCOME]: 'failed' }),
    ).toBe(K);
    // The retries were promoted back by the leader (this host: it is the only one).
    expect(await sum(sdk.reader, 'awa.job.promoted')).toBeGreaterThanOrEqual(R);

    // One process span per attempt; failures and retries carry an error status and the exception.
    const spans = spansNamed(sdk.spans, 'process tel_outcomes');
    expect(spans).toHaveLength(attempts);
    expect(spans.every((s) => s.kind === SpanKind.CONSUMER)).toBe(true);
    const byOutcome = (o: string) => spans.filter((s) => s.attributes[OUTCOME] === o);
    expect(byOutcome('failed')).toHaveLength(K);
    expect(byOutcome('failed').every((s) => s.status.code === 2 && s.events[0]?.name === 'exception')).toBe(
      true,
    );
    expect(byOutcome('completed').every((s) => s.status.code === 0)).toBe(true);
  });

  it("carries the enqueueing span's context into the job: the execution span is a child of the send span", async () => {
    const kind = defineJob({ kind: 'tel_trace', queue: 'tel_trace' });
    const tracer = trace.getTracer('test');
    const { id, traceId } = await tracer.startActiveSpan('request', async (span) => {
      const r = await client.enqueue(kind, {});
      span.end();
      return { id: r.id, traceId: span.spanContext().traceId };
    });
    const stored = await client.getJob(id);
    expect(stored?.meta?.trace?.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));

    let activeInHandler: string | undefined;
    const h = (await start('tel_trace')).register(kind, () => {
      activeInHandler = trace.getActiveSpan()?.spanContext().spanId;
    });
    await run(h);
    await waitFor('job done', () => h.stats.completed === 1);

    const [send] = spansNamed(sdk.spans, 'send tel_trace');
    const [exec] = spansNamed(sdk.spans, 'process tel_trace');
    const [receive] = spansNamed(sdk.spans, 'receive tel_trace');
    expect(send && exec && receive).toBeTruthy();
    expect(send!.spanContext().traceId).toBe(traceId);
    expect(stored!.meta!.trace!.traceparent).toContain(send!.spanContext().spanId);
    expect(exec!.spanContext().traceId).toBe(traceId);
    expect(exec!.parentSpanContext?.spanId).toBe(send!.spanContext().spanId);
    expect(exec!.attributes['messaging.message.id']).toBe(id);
    // …linked to the claim that took it, and active while the handler ran.
    expect(exec!.links.map((l) => l.context.spanId)).toEqual([receive!.spanContext().spanId]);
    expect(activeInHandler).toBe(exec!.spanContext().spanId);
  });

  it('writes no trace context into meta when no span is active, and the execution starts its own trace', async () => {
    const kind = defineJob({ kind: 'tel_untraced', queue: 'tel_untraced' });
    const { id } = await client.enqueue(kind, {}, { metadata: { a: 1 } });
    const stored = await client.getJob(id);
    expect(stored?.meta).toEqual({ metadata: { a: 1 } });

    const h = (await start('tel_untraced')).register(kind, () => {});
    await run(h);
    await waitFor('job done', () => h.stats.completed === 1);
    const [exec] = spansNamed(sdk.spans, 'process tel_untraced');
    expect(exec).toBeDefined();
    expect(exec!.parentSpanContext).toBeUndefined();
    // The send span still exists (the enqueue was traced as a root span of its own).
    expect(spansNamed(sdk.spans, 'send tel_untraced')).toHaveLength(1);
  });

  it('records rescue, rotation and prune as the leader reports them', async () => {
    const kind = defineJob({ kind: 'tel_rescue', queue: 'tel_rescue', maxAttempts: 3 });
    let started!: () => void;
    const hasStarted = new Promise<void>((r) => (started = r));
    const a = (await start('tel_rescue', { shutdownTimeoutMs: 50, maintenance: false })).register(
      kind,
      (_j, ctx) => {
        started();
        // Ignores its abort until well after stop(): its receipt stays open for the leader to rescue.
        return new Promise((resolve) => ctx.signal.addEventListener('abort', () => setTimeout(resolve, 300)));
      },
    );
    await client.enqueue(kind, {});
    await run(a);
    await hasStarted;
    await a.stop();

    const rescuedBefore = await sum(sdk.reader, 'awa.job.rescued', {
      'awa.rescue.reason': 'worker_lost',
      [OUTCOME]: 'retry',
    });
    const rotationsBefore = await sum(sdk.reader, 'awa.ring.rotations');
    const prunesBefore = await sum(sdk.reader, 'awa.ring.prunes');
    const generation = async () =>
      Number(
        (await client.pool.query<{ g: string }>(`select max(generation) as g from awa.ring_rotations`))
          .rows[0]!.g,
      );
    const generationBefore = await generation();

    const b = (
      await start('tel_rescue', { rescueIntervalMs: 50, ringIntervalMs: 20, ringSlotMinRows: 0 })
    ).register(kind, () => {});
    const rescued: RescuedAttempt[] = [];
    let pruneCalls = 0;
    b.on('rescue', (list) => rescued.push(...list));
    b.on('prune', () => pruneCalls++);
    await run(b);
    await waitFor('rescued job re-run', () => b.stats.completed === 1);
    // A few more ring ticks with work in the ring, so rotation has something to do.
    await client.enqueueMany(Array.from({ length: 20 }, () => ({ kind, args: {} })));
    await waitFor('ring ticks', () => b.stats.completed === 21 && pruneCalls >= 5);
    await b.stop();

    expect(rescued).toHaveLength(1);
    expect(
      (await sum(sdk.reader, 'awa.job.rescued', { 'awa.rescue.reason': 'worker_lost', [OUTCOME]: 'retry' })) -
        rescuedBefore,
    ).toBe(1);
    expect((await sum(sdk.reader, 'awa.ring.rotations')) - rotationsBefore).toBe(
      (await generation()) - generationBefore,
    );
    expect((await sum(sdk.reader, 'awa.ring.prunes')) - prunesBefore).toBe(pruneCalls);
    expect(
      await histogramCount(sdk.reader, 'awa.maintenance.duration', { 'awa.maintenance.step': 'rescue' }),
    ).toBeGreaterThan(0);
    expect(spansNamed(sdk.spans, 'awa.rescue').length).toBeGreaterThanOrEqual(1);
  }, 30_000);

  it('reports queue depth and oldest age from the leader, read at most once per cache period', async () => {
    const kind = defineJob({ kind: 'tel_depth', queue: 'tel_depth_backlog' });
    await client.enqueueMany(Array.from({ length: 5 }, () => ({ kind, args: {} })));
    // This host serves another queue: the backlog stays available, and the host reports it as leader.
    const h = await run(await start('tel_depth_served', { queues: { tel_depth_served: 7 } }));
    await waitFor('leadership', () => h.isLeader);

    const depth = (state: string) =>
      sum(sdk.reader, 'awa.queue.depth', { [Q]: 'tel_depth_backlog', 'awa.job.state': state });
    expect(await depth('available')).toBe(5);
    expect(await depth('running')).toBe(0);
    const [age] = (await points(sdk.reader, 'awa.queue.oldest_available.age')).filter(
      (p) => p.attributes[Q] === 'tel_depth_backlog',
    );
    expect(age?.value).toBeGreaterThan(0);
    expect(age?.value).toBeLessThan(60);
    // A sixth job right away is not seen yet: the read is cached, not repeated per collection.
    await client.enqueue(kind, {});
    expect(await depth('available')).toBe(5);

    expect(await sum(sdk.reader, 'awa.worker.capacity', { [Q]: 'tel_depth_served' })).toBe(7);
    expect(await sum(sdk.reader, 'awa.worker.in_flight', { [Q]: 'tel_depth_served' })).toBe(0);
    const leader = (await points(sdk.reader, 'awa.worker.leader')).map((p) => p.value);
    expect(leader).toContain(1);
  });

  it('reports the jobs a host holds ahead of its permits beside the ones it runs', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'tel_held', queue: 'tel_held' });
    let unstall!: () => void;
    const stall = new Promise<void>((r) => (unstall = r));
    let stalled = 0;
    // Eight permits, at most one job held ahead of them (prefetch 1). Eight permits of fast jobs give the host a
    // pace to hold by even on a machine whose cores are busy (with one permit, a slow enough machine never
    // finished 50 jobs a second, and held nothing); then jobs 201-208 stall all eight.
    const h = (await start('tel_held', { queues: { tel_held: { concurrency: 8, prefetch: 1 } } })).register(
      kind,
      async (j) => {
        if (j.args.n <= 200 || j.args.n > 208) return;
        stalled++;
        await stall;
      },
    );
    await client.enqueueMany(Array.from({ length: 300 }, (_, i) => ({ kind, args: { n: i + 1 } })));
    await run(h);
    const at = { [Q]: 'tel_held' };
    await waitFor('the stallers to start', () => stalled === 8);
    // With every permit stalled, the host holds the next job (for up to 250 ms; then it hands it back and, having
    // no pace left, holds nothing).
    await waitFor('a held job', async () => (await sum(sdk.reader, 'awa.worker.held', at)) === 1, 2_000);
    expect(await sum(sdk.reader, 'awa.worker.in_flight', at)).toBe(8);
    expect(await sum(sdk.reader, 'awa.worker.capacity', at)).toBe(8);
    unstall();
    await waitFor('every job completed', () => h.stats.completed === 300);
    expect(await sum(sdk.reader, 'awa.worker.held', at)).toBe(0);
    expect(await sum(sdk.reader, 'awa.worker.in_flight', at)).toBe(0);
  });

  it('counts callbacks registered, timed out in the handler and delivered, and DLQ moves and purges', async () => {
    const kind = defineJob({ kind: 'tel_cb', queue: 'tel_cb', maxAttempts: 1 });
    const h = (await start('tel_cb', { queues: { tel_cb: { concurrency: 2, dlq: true } } })).register(
      kind,
      async (_job, ctx) => {
        const token = await ctx.registerCallback();
        await ctx.waitForCallback(token, { timeoutMs: 100 });
      },
    );
    const { id } = await client.enqueue(kind, {});
    await run(h);
    await waitFor('job failed', () => h.stats.failed === 1);
    const job = { [Q]: 'tel_cb', [KIND]: 'tel_cb' };
    expect(await sum(sdk.reader, 'awa.callback.registered', job)).toBe(1);
    expect(await sum(sdk.reader, 'awa.callback.timed_out', { 'awa.callback.wait': 'handler' })).toBe(1);
    expect(await sum(sdk.reader, 'awa.dlq.moved', job)).toBe(1);

    const delivery = await client.completeExternal(crypto.randomUUID());
    expect(delivery.outcome).toBe('rejected');
    expect(
      await sum(sdk.reader, 'awa.callback.delivered', {
        'awa.callback.action': 'complete',
        'awa.callback.result': 'rejected',
      }),
    ).toBe(1);
    expect(await client.purgeDlq({ ids: [id] })).toBe(1);
    expect(await sum(sdk.reader, 'awa.dlq.purged')).toBe(1);
  });
});
