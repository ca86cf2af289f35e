import type { SystemAdapter } from './adapter.js';
import { AwaAdapter } from './adapters/awa.js';
import { BaselineAdapter } from './adapters/baseline.js';
import { GraphileAdapter } from './adapters/graphile.js';
import { PgBossAdapter } from './adapters/pgboss.js';

// The systems `--system` accepts. pgboss-batch is pg-boss with batch-ack handlers (not per-job semantics);
// it is only included in `--system all` where a scenario asks for it (drain). baseline is not a queue (a
// plain INSERT): only scenarios that list it in systemsForAll accept it (producers). awa+otel is awa with the
// OpenTelemetry SDK registered; it is chosen with --otel, not --system.

export const SYSTEMS = ['awa', 'pgboss', 'pgboss-batch', 'graphile', 'baseline'];

/** What `--otel` turns the awa system into. */
export const OTEL_MODES = ['none', 'sdk', 'both'] as const;

export function withOtel(systems: readonly string[], mode: (typeof OTEL_MODES)[number]): string[] {
  if (mode === 'none') return [...systems];
  return systems.flatMap((s) => (s !== 'awa' ? [s] : mode === 'sdk' ? ['awa+otel'] : ['awa', 'awa+otel']));
}

/** otelSample: the fraction of root traces the SDK records in awa+otel (1: all); shards: awa's enqueue shards;
 * prefetch: awa's held jobs per host (undefined: the default). */
export function makeAdapter(
  system: string,
  {
    otelSample = 1,
    shards = 1,
    prefetch,
  }: { otelSample?: number; shards?: number; prefetch?: number | undefined } = {},
): SystemAdapter {
  switch (system) {
    case 'awa':
      return new AwaAdapter(false, 1, shards, prefetch);
    case 'awa+otel':
      return new AwaAdapter(true, otelSample, shards, prefetch);
    case 'pgboss':
      return new PgBossAdapter('per-job');
    case 'pgboss-batch':
      return new PgBossAdapter('batch');
    case 'graphile':
      return new GraphileAdapter();
    case 'baseline':
      return new BaselineAdapter();
    default:
      throw new Error(`unknown system "${system}"`);
  }
}
