import type { SystemAdapter } from './adapter.js';
import { AwaAdapter } from './adapters/awa.js';
import { BaselineAdapter } from './adapters/baseline.js';
import { GraphileAdapter } from './adapters/graphile.js';
import { PgBossAdapter } from './adapters/pgboss.js';

// The systems `--system` accepts. pgboss-batch is pg-boss with batch-ack handlers (not per-job semantics);
// it is only included in `--system all` where a scenario asks for it (drain). baseline is not a queue (a
// plain INSERT): only scenarios that list it in systemsForAll accept it (producers). awa+otel is awa with the
// OpenTelemetry SDK registered; it is chosen with --otel, not --system. awa+sql is awa producing through the SQL
// function insert_job() instead of AwaClient.enqueue; enqueue --single adds it beside awa.

export const SYSTEMS = ['awa', 'pgboss', 'pgboss-batch', 'graphile', 'baseline'];

/** What `--otel` turns the awa system into. */
export const OTEL_MODES = ['none', 'sdk', 'both'] as const;

export function withOtel(systems: readonly string[], mode: (typeof OTEL_MODES)[number]): string[] {
  if (mode === 'none') return [...systems];
  return systems.flatMap((s) => (s !== 'awa' ? [s] : mode === 'sdk' ? ['awa+otel'] : ['awa', 'awa+otel']));
}

/** With `single`, awa+sql right after awa: the same single-job enqueues through SQL, side by side. */
export function withSqlProducer(systems: readonly string[], single: boolean): string[] {
  if (!single) return [...systems];
  return systems.flatMap((s) => (s === 'awa' ? ['awa', 'awa+sql'] : [s]));
}

/** With --pooler-url, awa is awa+pgbouncer: the same, connected through the pooler. */
export function withPooler(systems: readonly string[], poolerUrl: string | undefined): string[] {
  return poolerUrl === undefined ? [...systems] : systems.map((s) => (s === 'awa' ? 'awa+pgbouncer' : s));
}

/** otelSample: the fraction of root traces the SDK records in awa+otel (1: all); shards: awa's enqueue shards;
 * prefetch: awa's held jobs per host (undefined: the default); poolerUrl: awa+pgbouncer's pooler. */
export function makeAdapter(
  system: string,
  {
    otelSample = 1,
    shards = 1,
    prefetch,
    poolerUrl,
  }: {
    otelSample?: number;
    shards?: number;
    prefetch?: number | undefined;
    poolerUrl?: string | undefined;
  } = {},
): SystemAdapter {
  switch (system) {
    case 'awa':
      return new AwaAdapter(false, 1, shards, prefetch);
    case 'awa+otel':
      return new AwaAdapter(true, otelSample, shards, prefetch);
    case 'awa+sql':
      return new AwaAdapter(false, 1, shards, prefetch, 'sql');
    case 'awa+pgbouncer':
      if (!poolerUrl) throw new Error('awa+pgbouncer needs --pooler-url');
      return new AwaAdapter(false, 1, shards, prefetch, 'client', poolerUrl);
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
