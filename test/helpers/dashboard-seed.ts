import {
  defineJob,
  FailJob,
  WorkerHost,
  type AwaClient,
  type Job,
  type JobContext,
  type WorkerOptions,
} from '../../src/index.js';
import { until } from './wait.js';

// A small but varied history for the dashboard's tests and screenshots, made the way production makes it
// (enqueue, a real worker host claiming, completing, failing into the DLQ, recording progress):
//   mail       24 completed, 1 failed for good (not a DLQ queue)
//   reports    6 available (one whose args hold markup, to prove it is shown as text), 1 scheduled tomorrow
//   billing    3 dead-lettered (a DLQ queue)
//   webhooks   1 dead-lettered (a DLQ queue) whose reason holds a long URL, to prove narrow pages wrap it
//   media      1 running, parked mid-way with recorded progress until release() or stop()

export const HOSTILE_TEXT = '<img src=x onerror="window.__awaXss=1">';
export const WEBHOOK_URL =
  'https://hooks.example.com/v1/tenants/7f3c2a9e-41b8-4d0e-9c55-2b1e6f0a8d13/subscriptions/order.updated/' +
  'deliveries?attempt=1&signature=sha256-9b74c9897bac770ffc029102a200c5de';

export interface DashboardSeed {
  host: WorkerHost;
  completed: string[];
  failed: string;
  available: string[];
  hostile: string;
  scheduled: string;
  dlq: string[];
  /** The webhooks queue's DLQ entry. */
  webhook: string;
  running: string;
  /** Lets the running media job finish. */
  release(): void;
  /** Stops the host (releasing the running job first). */
  stop(): Promise<void>;
}

const mail = defineJob<{ to: string; n: number }>({ kind: 'send_email', queue: 'mail' });
const flaky = defineJob<{ n: number }>({ kind: 'sync_contacts', queue: 'mail', maxAttempts: 1 });
const report = defineJob<{ report: string; note?: string }>({ kind: 'build_report', queue: 'reports' });
const charge = defineJob<{ invoice: string; cents: number }>({
  kind: 'charge_card',
  queue: 'billing',
  maxAttempts: 1,
});
const transcode = defineJob<{ file: string }>({ kind: 'transcode', queue: 'media' });
const deliver = defineJob<{ url: string }>({ kind: 'deliver_webhook', queue: 'webhooks', maxAttempts: 1 });

export async function seedDashboard(
  url: string,
  client: AwaClient,
  extra: Partial<WorkerOptions> = {},
): Promise<DashboardSeed> {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const host = new WorkerHost({
    connectionString: url,
    queues: {
      mail: 4,
      billing: { concurrency: 2, dlq: true },
      media: 1,
      webhooks: { concurrency: 1, dlq: true },
    },
    pollIntervalMs: 20,
    promoteIntervalMs: 50,
    leaderElectionIntervalMs: 50,
    heartbeatIntervalMs: 200,
    shutdownTimeoutMs: 3_000,
    ...extra,
  });
  host.on('error', () => {});
  host.register(mail, async () => {});
  host.register(flaky, () => {
    throw new FailJob('contacts API answered 503 three times');
  });
  host.register(charge, (job: Job<{ invoice: string; cents: number }>) => {
    throw new FailJob(`card declined for invoice ${job.args.invoice}`);
  });
  host.register(deliver, (job: Job<{ url: string }>) => {
    throw new FailJob(`POST ${job.args.url} answered 410 Gone`);
  });
  host.register(transcode, async (_job: Job<{ file: string }>, ctx: JobContext) => {
    ctx.progress({ percent: 40, stage: 'encoding' });
    await Promise.race([gate, new Promise((r) => ctx.signal.addEventListener('abort', r, { once: true }))]);
  });

  const completed = (
    await client.enqueueMany(
      Array.from({ length: 24 }, (_, n) => ({ kind: mail, args: { to: `user${n}@example.com`, n } })),
    )
  ).map((r) => r.id);
  const failed = (await client.enqueue(flaky, { n: 1 })).id;
  const dlq = (
    await client.enqueueMany(
      ['INV-1001', 'INV-1002', 'INV-1003'].map((invoice, i) => ({
        kind: charge,
        args: { invoice, cents: 1200 + i },
      })),
    )
  ).map((r) => r.id);
  const webhook = (await client.enqueue(deliver, { url: WEBHOOK_URL })).id;
  const available = (
    await client.enqueueMany(
      Array.from({ length: 5 }, (_, n) => ({ kind: report, args: { report: `weekly-${n}` } })),
    )
  ).map((r) => r.id);
  const hostile = (await client.enqueue(report, { report: 'hostile', note: HOSTILE_TEXT })).id;
  available.push(hostile);
  const scheduled = (
    await client.enqueue(report, { report: 'monthly' }, { runAt: new Date(Date.now() + 86_400_000) })
  ).id;
  const running = (await client.enqueue(transcode, { file: 'talk.mp4' })).id;

  let stopped: Promise<void> | undefined;
  await host.start();
  await until(
    'the seed jobs to settle',
    async () => {
      const [done, fail, dead, hook, progress] = await Promise.all([
        Promise.all(completed.map(async (id) => (await client.getJob(id))?.state)),
        client.getJob(failed),
        client.listDlq({ queue: 'billing' }),
        client.getJob(webhook),
        client.jobProgress(running),
      ]);
      return (
        done.every((s) => s === 'completed') &&
        fail?.state === 'failed' &&
        dead.length === 3 &&
        hook?.state === 'dlq' &&
        progress !== null
      );
    },
    30_000,
  );
  return {
    host,
    completed,
    failed,
    available,
    hostile,
    scheduled,
    dlq,
    webhook,
    running,
    release,
    stop: () =>
      (stopped ??= (async () => {
        release();
        await host.stop();
      })()),
  };
}
