import type { Scenario } from '../scenario.js';
import { steadyRun } from '../steady.js';

// A long steady run without a pinned snapshot: storage should stay bounded. For awa the extra figures
// include ring rotations and prunes (slots truncated instead of vacuumed); for every system the series
// has table bytes and dead tuples over time.

export const soakScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile'],
  run: (ctx) => steadyRun(ctx, false),
};
