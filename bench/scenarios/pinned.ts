import type { Scenario } from '../scenario.js';
import { steadyRun } from '../steady.js';

// Steady load while a REPEATABLE READ snapshot pins the xmin horizon (see steady.ts).

export const pinnedScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile'],
  run: (ctx) => steadyRun(ctx, true),
};
