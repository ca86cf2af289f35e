import { defineJob, type Settlement } from '../../src/index.js';
import { buildJobRow, toJobRow } from '../../src/model/enqueue-options.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodeArgs } from '../../src/model/payload.js';
import { SettleBatcher } from '../../src/host/settle-batcher.js';
import { HostStats } from '../../src/host/stats.js';
import type { Measurement, Scenario } from '../scenario.js';
import { round } from '../scenario.js';
import { loadPeer } from '../peer.js';

// Micro-benchmarks of the hot pure functions on the producer and completion paths, to catch regressions
// without a database: args encoding (the strict replacer runs for every value), job-row building, the
// settle batcher's bookkeeping per 512 results, and recording a pickup in the hdr histogram.

const kind = defineJob<unknown>({ kind: 'bench_micro', queue: 'bench' });
const small = { i: 42, t: 1_700_000_000_000.5 };
const medium = {
  user: { id: 'u_123', email: 'someone@example.com' },
  items: Array.from({ length: 8 }, (_, i) => ({ sku: `sku-${i}`, qty: i })),
  note: 'x'.repeat(128),
};

function settlement(i: number): Settlement {
  return {
    claimSlot: 0,
    batchId: '1',
    idx: i,
    jobId: String(i),
    runLease: 1,
    outcome: 'completed',
  } as Settlement;
}

async function batch512(): Promise<void> {
  const flushed = new Promise<void>((resolve) => {
    const b = new SettleBatcher(
      {
        flush: async (items) => new Set(items.map((s) => s.jobId)),
        onFlushed: () => resolve(),
        onError: () => {},
      },
      512,
      1,
    );
    for (let i = 0; i < 512; i++) b.add(settlement(i));
  });
  await flushed;
}

export const microScenario: Scenario = {
  kind: 'standalone',
  async run(opts): Promise<Measurement> {
    const stats = new HostStats();
    const smallJson = encodeArgs('bench_micro', small, DEFAULT_MAX_PAYLOAD_BYTES);
    const { Bench } = await loadPeer('the micro scenario', () => import('tinybench'));
    const bench = new Bench({ time: Math.max(200, Math.min(opts.duration, 10) * 100) });
    bench
      .add('encodeArgs small', () => void encodeArgs('bench_micro', small, DEFAULT_MAX_PAYLOAD_BYTES))
      .add('encodeArgs 0.5 KiB', () => void encodeArgs('bench_micro', medium, DEFAULT_MAX_PAYLOAD_BYTES))
      .add('buildJobRow', () => void buildJobRow(kind, smallJson, undefined, 0))
      .add(
        'toJobRow (validate+encode+build)',
        async () => void (await toJobRow(kind, small, undefined, DEFAULT_MAX_PAYLOAD_BYTES)),
      )
      .add('settle batcher, 512 results', batch512)
      .add('hdr recordPickup', () => stats.recordPickup(1.234));
    await bench.run();
    const tasks = bench.tasks.map((t) => {
      const r = t.result;
      if (r.state !== 'completed') return { task: t.name, state: r.state };
      return {
        task: t.name,
        opsPerSec: Math.round(r.throughput.mean),
        meanUs: round(r.latency.mean * 1000, 3),
        p99Us: round(r.latency.p99 * 1000, 3),
        samples: r.latency.samplesCount,
      };
    });
    return { extra: { tasks } };
  },
};
