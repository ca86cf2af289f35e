// Awa's OpenTelemetry metrics on a Prometheus endpoint.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/awa_demo npx tsx examples/otel-prometheus.ts
//   curl -s localhost:9464/metrics | grep -E '^(awa|messaging)_'
//
// It registers the OpenTelemetry metrics SDK with the Prometheus exporter (a pull reader serving
// /metrics on port 9464, or $PROMETHEUS_PORT), then migrates, starts a worker host and enqueues a few
// jobs a second, some of which fail, until Ctrl-C. The SDK must be registered before the client and the
// host are created: they take their meter when they are built. Point Prometheus at the endpoint and
// import docs/grafana-awa.json into Grafana to see them.
import { metrics } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { AwaClient, defineJob, FailJob, WorkerHost } from '../src/index.js';

const url = process.env.DATABASE_URL;
if (!url) {
  console.error('set DATABASE_URL to a PostgreSQL database Awa may migrate');
  process.exit(2);
}
const port = Number(process.env.PROMETHEUS_PORT ?? 9464);

const exporter = new PrometheusExporter({ port });
const meterProvider = new MeterProvider({ readers: [exporter] });
metrics.setGlobalMeterProvider(meterProvider);

const resize = defineJob<{ image: string; fail: boolean }>({
  kind: 'resize_image',
  queue: 'images',
  maxAttempts: 2,
});

const client = new AwaClient({ connectionString: url });
await client.migrate();
const host = new WorkerHost({ connectionString: url, queues: { images: 8 } });
host.register(resize, async (job) => {
  await new Promise((r) => setTimeout(r, 5 + Math.random() * 45));
  if (job.args.fail) throw new FailJob(`cannot read ${job.args.image}`);
});
host.on('error', (err) => console.error('[awa]', err instanceof Error ? err.message : err));
await host.start();
console.log(`metrics on http://localhost:${port}/metrics (Ctrl-C to stop)`);

let n = 0;
const producer = setInterval(() => {
  const jobs = Array.from({ length: 5 }, () => ({
    kind: resize,
    args: { image: `photo-${++n}.jpg`, fail: n % 10 === 0 },
  }));
  client.enqueueMany(jobs).catch((err: unknown) => console.error('[enqueue]', err));
}, 1000);

const stop = async () => {
  clearInterval(producer);
  await host.stop();
  await client.close();
  await meterProvider.shutdown();
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
