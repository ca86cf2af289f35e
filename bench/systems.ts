import type { SystemAdapter } from './adapter.js';
import { AwaAdapter } from './adapters/awa.js';
import { BaselineAdapter } from './adapters/baseline.js';
import { GraphileAdapter } from './adapters/graphile.js';
import { PgBossAdapter } from './adapters/pgboss.js';

// The systems `--system` accepts. pgboss-batch is pg-boss with batch-ack handlers (not per-job semantics);
// it is only included in `--system all` where a scenario asks for it (drain). baseline is not a queue (a
// plain INSERT): only scenarios that list it in systemsForAll accept it (producers).

export const SYSTEMS = ['awa', 'pgboss', 'pgboss-batch', 'graphile', 'baseline'];

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
    case 'baseline':
      return new BaselineAdapter();
    default:
      throw new Error(`unknown system "${system}"`);
  }
}
