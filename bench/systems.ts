import type { SystemAdapter } from './adapter.js';
import { AwaAdapter } from './adapters/awa.js';
import { GraphileAdapter } from './adapters/graphile.js';
import { PgBossAdapter } from './adapters/pgboss.js';

// The systems `--system` accepts. pgboss-batch is pg-boss with batch-ack handlers (not per-job semantics);
// it is only included in `--system all` where a scenario asks for it (drain).

export const SYSTEMS = ['awa', 'pgboss', 'pgboss-batch', 'graphile'];

export function makeAdapter(system: string): SystemAdapter {
  switch (system) {
    case 'awa':
      return new AwaAdapter();
    case 'pgboss':
      return new PgBossAdapter('per-job');
    case 'pgboss-batch':
      return new PgBossAdapter('batch');
    case 'graphile':
      return new GraphileAdapter();
    default:
      throw new Error(`unknown system "${system}"`);
  }
}
