import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storageFixture, type StorageFixture } from '../integration/storage-fixture.js';
import { claimBatches } from '../helpers/claim.js';
import { STORAGE_VARIANTS } from './variants.js';

// Every position a receipt's range spans is accounted for, exactly once: either a member (claimed) or a gap
// (left for a producer still in flight). A position that is neither reads as claimed and its job never runs:
// that is how test/integration/callbacks.test.ts lost one of 40 concurrently enqueued jobs on a loaded
// machine (receipt range 1..10, members 1, 3, 4, 10, gaps 2 and 6..9: the producer of 5 committed between
// the claim's read of the rows and its separate, later read of the gaps). Producers here commit as fast as
// they can while a claimer claims, so commits keep landing inside claims. The second case splits the queue
// into enqueue shards with two claimers taking lanes side by side.

const PRODUCERS = 6;
const RUN_MS = 3_000;

describe.each(STORAGE_VARIANTS)('claim accounting under concurrent producers ($name storage)', (variant) => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('claim_accounting', variant);
  });
  afterAll(async () => {
    await f.close();
  });

  it.each([
    { queue: 'ca', shards: 1, claimers: 1 },
    { queue: 'ca_sharded', shards: 3, claimers: 2 },
  ])(
    'each receipt’s range is exactly its members plus its gaps, and every committed job is claimed once ($shards shard(s), $claimers claimer(s))',
    async ({ queue, shards, claimers }) => {
      if (shards > 1) await f.client.setEnqueueShards(queue, shards, { create: true });
      await f.client.enqueue('ca_job', { warmup: true }, { queue }); // creates the lanes
      const stopAt = Date.now() + RUN_MS;
      const enqueued: string[] = [];
      const producers = Array.from({ length: PRODUCERS }, async () => {
        const c = new pg.Client({ connectionString: f.url, application_name: 'ca-producer' });
        await c.connect();
        try {
          while (Date.now() < stopAt) {
            // One job per transaction, like an application enqueuing inside its own work.
            const [r] = await f.client.enqueueMany([{ kind: 'ca_job', args: {}, options: { queue } }], {
              client: c,
            });
            enqueued.push(r!.id);
          }
        } finally {
          await c.end();
        }
      });
      const claimed: string[] = [];
      const claim = async () =>
        (
          await claimBatches(f.storage, f.pool, {
            queue,
            max: 1000,
            instanceId: 'ca',
            agingSeconds: 3600,
            deadlineSeconds: 0,
          })
        ).flatMap((b) => b.jobs.map((j) => j.id));
      const claimerLoops = Array.from({ length: claimers }, async () => {
        while (Date.now() < stopAt) claimed.push(...(await claim()));
      });
      await Promise.all([...producers, ...claimerLoops]);
      // Everything committed now: a few more claims take the late rows.
      for (let i = 0; i < 20; i++) claimed.push(...(await claim()));

      // The receipts' own accounting: members (lane_seqs, or the whole range when it is null) and gaps are
      // disjoint and together make up the range.
      const { rows: bad } = await f.pool.query(
        `select b.batch_id, b.first_seq, b.last_seq, b.lane_seqs, b.gaps::text
         from awa.claim_batches b join awa.lanes l using (lane_id)
         cross join lateral (select coalesce(
           (select range_agg(int8range(s, s + 1)) from unnest(b.lane_seqs) s),
           case when b.lane_seqs is null and b.size > 0 then int8multirange(int8range(b.first_seq, b.last_seq + 1)) end,
           '{}'::int8multirange) as members) m
        where l.queue = $1
          and (m.members + coalesce(b.gaps, '{}') <> int8multirange(int8range(b.first_seq, b.last_seq + 1))
               or not isempty(m.members * coalesce(b.gaps, '{}')))`,
        [queue],
      );
      expect(bad, 'receipts whose members and gaps do not make up their range').toEqual([]);
      // And end to end: every job whose producer committed was claimed, once.
      expect(enqueued.length).toBeGreaterThan(100);
      const once = new Set(claimed);
      expect(claimed.length).toBe(once.size);
      expect(enqueued.filter((id) => !once.has(id))).toEqual([]);
      if (shards > 1) {
        const { rows: used } = await f.pool.query(
          `select distinct b.lane_id from awa.claim_batches b join awa.lanes l using (lane_id)
          where l.queue = $1 and b.size > 0`,
          [queue],
        );
        expect(used.length, 'lanes the claims took jobs from').toBe(shards);
      }
    },
    30_000,
  );
});
