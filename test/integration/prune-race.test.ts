import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  claimJobs,
  finishAttempts,
  pruneRing,
  rotateRing,
  type Settlement,
} from '../../src/storage/index.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// Rotation and prune race producers, claimers and completers on separate connections. Prune may only
// ever truncate a slot that is spent, so every job must be claimed and completed exactly once.

describe('ring prune racing claims and completions', () => {
  let f: StorageFixture;
  beforeAll(async () => {
    f = await storageFixture('prune');
  });
  afterAll(async () => {
    await f.close();
  });

  it('loses no job and completes none twice while slots are rotated and truncated under load', async () => {
    const TOTAL = 12_000;
    const produced: string[] = [];
    const completed = new Map<string, number>();
    const claimed = new Set<string>();
    const outcomes: Record<string, number> = {};
    let producing = true;
    const conns = await Promise.all(
      [1, 2, 3, 4].map(async () => {
        const c = new pg.Client(f.url);
        await c.connect();
        return c;
      }),
    );
    const [producerConn, claimerA, claimerB, maintConn] = conns as [
      pg.Client,
      pg.Client,
      pg.Client,
      pg.Client,
    ];

    const producer = (async () => {
      for (let i = 0; produced.length < TOTAL; i++) {
        const ids = (
          await f.client.enqueueMany(
            Array.from({ length: 150 }, (_, k) => ({
              kind: 'r',
              args: { i, k },
              options: { queue: 'ring', priority: ((k % 2) + 1) as 1 },
            })),
            { client: producerConn },
          )
        ).map((r) => r.id);
        produced.push(...ids);
      }
      producing = false;
    })();

    const worker = (conn: pg.Client) => async () => {
      let idle = 0;
      while (producing || idle < 20) {
        const batches = await claimJobs(conn, f.schema, {
          queue: 'ring',
          max: 97,
          instanceId: 'race',
          agingSeconds: 60,
          deadlineSeconds: 0,
        });
        const items: Settlement[] = [];
        for (const b of batches) {
          for (const j of b.jobs) {
            expect(claimed.has(`${j.id}:${j.runLease}`)).toBe(false);
            claimed.add(`${j.id}:${j.runLease}`);
            items.push({
              claimSlot: b.claimSlot,
              batchId: b.batchId,
              idx: j.idx,
              jobId: j.id,
              runLease: j.runLease,
              outcome: 'completed',
            });
          }
        }
        idle = items.length === 0 ? idle + 1 : 0;
        if (items.length === 0) {
          await new Promise((r) => setTimeout(r, 5));
          continue;
        }
        for (const id of await finishAttempts(conn, f.schema, items))
          completed.set(id, (completed.get(id) ?? 0) + 1);
      }
    };

    const maintenance = (async () => {
      while (producing || completed.size < produced.length) {
        await rotateRing(maintConn, f.schema);
        const r = await pruneRing(maintConn, f.schema, {
          lockTimeoutMs: 5,
          carryLimit: 0,
          carryAfterSlots: 16,
        });
        outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + 1;
        await new Promise((res) => setTimeout(res, 2));
      }
    })();

    await Promise.all([producer, worker(claimerA)(), worker(claimerB)(), maintenance]);
    await Promise.all(conns.map((c) => c.end()));

    expect(produced.length).toBeGreaterThanOrEqual(TOTAL);
    const lost = produced.filter((id) => !completed.has(id));
    expect(lost).toEqual([]);
    expect([...completed.values()].every((n) => n === 1)).toBe(true);
    expect(completed.size).toBe(produced.length);
    // The race really happened: slots were truncated while work was in flight.
    expect(outcomes.pruned ?? 0).toBeGreaterThan(3);
    const { rows } = await f.pool.query(`select count(*)::int as n from awa.ring_rotations`);
    expect(rows[0].n).toBeGreaterThan(3);
  });
});
