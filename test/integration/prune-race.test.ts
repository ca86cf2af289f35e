import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settleAttempts, pruneRing, rotateRing, type Settlement } from '../../src/storage/operations.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';
import { claimBatches, settle } from '../helpers/claim.js';

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
    let claimersDone = false;
    const conns = await Promise.all(
      [1, 2, 3, 4, 5, 6].map(async () => {
        const c = new pg.Client(f.url);
        await c.connect();
        return c;
      }),
    );
    const [claimerA, claimerB, maintConn, ...producerConns] = conns as [
      pg.Client,
      pg.Client,
      pg.Client,
      ...pg.Client[],
    ];

    // Three producers in transactions of their own, holding them open a little and rolling back one in
    // seven: their positions interleave and leave gaps that the claims must skip, fill and pass.
    let rolledBack = 0;
    const producer = async (conn: pg.Client, p: number) => {
      for (let i = 0; produced.length < TOTAL; i++) {
        await conn.query('begin');
        const ids = (
          await f.client.enqueueMany(
            Array.from({ length: 50 }, (_, k) => ({
              kind: 'r',
              args: { p, i, k },
              options: { queue: 'ring', priority: ((k % 2) + 1) as 1 },
            })),
            { client: conn },
          )
        ).map((r) => r.id);
        await new Promise((r) => setTimeout(r, (i * 7 + p) % 4));
        if ((i + p) % 7 === 3) {
          await conn.query('rollback');
          rolledBack += ids.length;
        } else {
          await conn.query('commit');
          produced.push(...ids);
        }
      }
    };
    const producers = Promise.all(producerConns.map((c, p) => producer(c, p))).then(() => {
      producing = false;
    });

    const worker = (conn: pg.Client) => async () => {
      let idle = 0;
      while (producing || idle < 20) {
        const batches = await claimBatches(f.storage, conn, {
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
            items.push(settle(b, j, 'completed'));
          }
        }
        idle = items.length === 0 ? idle + 1 : 0;
        if (items.length === 0) {
          await new Promise((r) => setTimeout(r, 5));
          continue;
        }
        for (const id of await settleAttempts(conn, f.schema, items))
          completed.set(id, (completed.get(id) ?? 0) + 1);
      }
    };

    const maintenance = (async () => {
      // Until the claimers give up (a lost job then shows in the checks below, by id, instead of a hang).
      while (!claimersDone) {
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

    const claimers = Promise.all([worker(claimerA)(), worker(claimerB)()]).then(() => {
      claimersDone = true;
    });
    await Promise.all([producers, claimers, maintenance]);
    expect(rolledBack).toBeGreaterThan(0);
    await Promise.all(conns.map((c) => c.end()));

    expect(produced.length).toBeGreaterThanOrEqual(TOTAL);
    // The race really happened: slots were truncated while work was in flight.
    expect(outcomes.pruned ?? 0).toBeGreaterThan(3);
    const { rows } = await f.pool.query(`select count(*)::int as n from awa.ring_rotations`);
    expect(rows[0].n).toBeGreaterThan(3);

    // The database's own evidence, not the code's reports: rotate and prune until the ring is empty, so every
    // completion has left the ring for compact history, then read each job id there with its multiplicity.
    for (let i = 0; i < 40; i++) {
      await rotateRing(f.pool, f.schema);
      await pruneRing(f.pool, f.schema, { lockTimeoutMs: 50, carryLimit: 0, carryAfterSlots: 16 });
      const left = await f.pool.query(`select count(*)::int as n from awa.ready_entries`);
      if (left.rows[0].n === 0) break;
    }
    expect((await f.pool.query(`select count(*)::int as n from awa.ready_entries`)).rows[0].n).toBe(0);
    const history = await f.pool.query<{ id: string; n: number }>(
      `select g::text as id, count(*)::int as n
         from awa.completed_history h, unnest(h.ids) r, generate_series(lower(r), upper(r) - 1) g
        group by g`,
    );
    const times = new Map(history.rows.map((r) => [r.id, r.n]));
    // Each completed exactly once; a failure names the job with both counts.
    const wrong = produced
      .filter((id) => times.get(id) !== 1 || completed.get(id) !== 1)
      .map((id) => ({ id, history: times.get(id) ?? 0, ledger: completed.get(id) ?? 0 }));
    expect(wrong).toEqual([]);
    expect(times.size).toBe(produced.length); // and nothing else
    // The code's own ledger agrees.
    expect(produced.filter((id) => completed.get(id) !== 1)).toEqual([]);
  });
});
