import { context, trace } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, defineJob, FailJob, WorkerHost } from '../../src/index.js';
import { createTestDatabase } from '../helpers/database.js';
import { createTestSdk, recordedNames, type TestSdk } from '../helpers/otel.js';

// Without a registered SDK, Awa talks to the OpenTelemetry API's no-ops only. An SDK that exists in the
// process but was never registered must see nothing: Awa never reaches for a provider of its own. (Its own
// file: registration is process-wide, and the other telemetry tests register one.)

let sdk: TestSdk;
let db: Awaited<ReturnType<typeof createTestDatabase>>;
let client: AwaClient;

beforeAll(async () => {
  sdk = createTestSdk(false);
  db = await createTestDatabase('telemetry_off');
  client = new AwaClient({ connectionString: db.url });
  await client.migrate();
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
  await sdk?.shutdown();
});

describe('telemetry with no SDK registered', () => {
  it('runs jobs as usual, records nothing and writes no trace context', async () => {
    const kind = defineJob<{ fail: boolean }>({ kind: 'off_kind', queue: 'off_q', maxAttempts: 1 });
    // A span from the unregistered provider, made active by hand: with no context manager registered the
    // API keeps no active context, so the enqueue sees none.
    const span = sdk.tracerProvider.getTracer('test').startSpan('request');
    const ids = await context.with(trace.setSpan(context.active(), span), () =>
      client.enqueueMany([
        { kind, args: { fail: false } },
        { kind, args: { fail: true } },
        { kind, args: { fail: false } },
      ]),
    );
    span.end();
    await client.copyEnqueue([{ kind, args: { fail: false } }]);

    const h = new WorkerHost({
      connectionString: db.url,
      queues: { off_q: 2 },
      pollIntervalMs: 20,
      completedRetentionMs: 3_600_000,
    });
    h.register(kind, (job) => {
      expect(trace.getActiveSpan()).toBeUndefined();
      if (job.args.fail) throw new FailJob('no');
    });
    await h.start();
    try {
      const until = Date.now() + 15_000;
      while (h.stats.completed + h.stats.failed < 4 && Date.now() < until)
        await new Promise((r) => setTimeout(r, 10));
    } finally {
      await h.stop();
    }
    expect(h.stats).toMatchObject({ completed: 3, failed: 1 });

    // No trace context in any job's meta; the one that failed has its error there, and nothing else.
    expect(
      (await Promise.all(ids.map(({ id }) => client.getJob(id)))).map((j) => Object.keys(j?.meta ?? {})),
    ).toEqual([[], ['errors'], []]);
    expect(await recordedNames(sdk.reader)).toEqual([]);
    // Only the test's own span: Awa made none.
    expect(sdk.spans.getFinishedSpans().map((s) => s.name)).toEqual(['request']);
  });
});
