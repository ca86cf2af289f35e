import type { QueueLimits } from '../../src/model/limits.js';
import { registerInstance, ringStorage } from '../../src/storage/operations.js';
import type { TestSchema } from '../../src/testing/index.js';
import { claimBatches } from './claim.js';

// A limited queue without a running host, for tests of what operators see of flow control (CLI, dashboard): a
// host registered as serving `api` with `limits` declared (and `plain` without), and one claim of `api` made as
// that host's dispatcher makes one.

export async function declareLimitedHost(
  t: TestSchema,
  instanceId: string,
  limits: QueueLimits,
): Promise<void> {
  await registerInstance(
    t.client.pool,
    t.client.schema,
    instanceId,
    [
      { queue: 'api', dlq: false, concurrency: 10, limits },
      { queue: 'plain', dlq: false, concurrency: 1 },
    ],
    'test',
  );
}

/** One claim of `api` by the host; how many jobs it started. */
export async function claimAsHost(t: TestSchema, instanceId: string): Promise<number> {
  const batches = await claimBatches(ringStorage(t.client.schema), t.client.pool, {
    queue: 'api',
    max: 10,
    instanceId,
    agingSeconds: 60,
    deadlineSeconds: 0,
  });
  return batches.reduce((n, b) => n + b.jobs.length, 0);
}
