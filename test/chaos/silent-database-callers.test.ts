// Chaos: the database goes silent under a producer, and under a host that is starting. Nothing is closed and
// no error arrives (see silent-proxy.ts). A producer's AwaClient bounds the statements on its own pool as a
// worker host does (queryTimeoutMs): a call on a silent connection fails with AWA_DATABASE_UNRESPONSIVE
// instead of waiting as long as TCP keeps the flow (for ever behind a relay that acknowledges it), the dead
// connection is discarded, and the next call gets a new one. migrate() runs on a connection of its own with
// no bound, because migrations may legitimately wait longer. A host's start() that meets a silent database
// fails with the same typed error rather than pg's bare "Query read timeout".
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, WorkerHost, defineJob } from '../../src/index.js';
import { sidePool, type TestDatabase } from '../helpers/database.js';
import { migratedDatabase } from '../helpers/host-database.js';
import { optionError } from '../helpers/option-error.js';
import { startSilentProxy, type SilentProxy } from '../helpers/silent-proxy.js';

const QUERY_TIMEOUT_MS = 1_000;
/** The bound plus pg's grace (half as long again) plus slack for a loaded machine. */
const GIVE_UP_WITHIN_MS = 3_500;

async function elapsed<T>(work: Promise<T>): Promise<{ ms: number; outcome: PromiseSettledResult<T> }> {
  const t0 = performance.now();
  const [outcome] = await Promise.allSettled([work]);
  return { ms: performance.now() - t0, outcome: outcome! };
}

function codeOf(outcome: PromiseSettledResult<unknown>): unknown {
  return outcome.status === 'rejected' ? (outcome.reason as { code?: unknown }).code : 'resolved';
}

describe('chaos: the database goes silent under producers and a starting host', () => {
  let db: TestDatabase;
  let admin: pg.Pool;
  let proxy: SilentProxy | undefined;
  let producer: AwaClient | undefined;
  beforeAll(async () => {
    const migrated = await migratedDatabase('silent_callers', { poolSize: 1 });
    db = migrated.db;
    await migrated.client.close();
    admin = sidePool(db.url, 2, 'silent-callers-test');
  });
  afterEach(async () => {
    await producer?.close();
    await proxy?.close();
    producer = undefined;
    proxy = undefined;
  });
  afterAll(async () => {
    await admin?.end();
    await db?.drop();
  });

  const jobIds = async (queue: string) =>
    (
      await admin.query<{ id: string }>(
        `select job_id::text as id from awa.ready_entries where queue = $1 order by job_id`,
        [queue],
      )
    ).rows.map((r) => r.id);

  it('an enqueue and a COPY on a silent connection fail as AWA_DATABASE_UNRESPONSIVE within the bound; the next calls go through, and exactly the acknowledged jobs exist', async () => {
    proxy = await startSilentProxy(db.url);
    const kind = defineJob<{ n: number }>({ kind: 'silent_producer_job', queue: 'silent_producer' });
    producer = new AwaClient({ connectionString: proxy.url, poolSize: 1, queryTimeoutMs: QUERY_TIMEOUT_MS });
    const acknowledged: string[] = [];
    for (let n = 0; n < 5; n++) acknowledged.push((await producer.enqueue(kind, { n })).id);

    // The pool's one connection, idle, goes silent; the next enqueue is sent into it.
    expect(proxy.silence()).toBe(1);
    const lost = await elapsed(producer.enqueue(kind, { n: 5 }));
    expect(codeOf(lost.outcome)).toBe('AWA_DATABASE_UNRESPONSIVE');
    expect(lost.ms).toBeGreaterThanOrEqual(QUERY_TIMEOUT_MS);
    expect(lost.ms).toBeLessThan(GIVE_UP_WITHIN_MS);
    // The dead connection was discarded: this one opens a new connection through the relay.
    acknowledged.push((await producer.enqueue(kind, { n: 6 })).id);

    expect(proxy.silence()).toBe(1);
    const jobs = Array.from({ length: 100 }, (_, i) => ({ kind, args: { n: 100 + i } }));
    const lostCopy = await elapsed(producer.copyEnqueue(jobs));
    expect(codeOf(lostCopy.outcome)).toBe('AWA_DATABASE_UNRESPONSIVE');
    expect(lostCopy.ms).toBeLessThan(GIVE_UP_WITHIN_MS);
    expect(await producer.copyEnqueue(jobs)).toEqual({ inserted: 100, duplicates: 0 });

    // The silenced statements never reached the server: six single jobs and one COPY of 100, nothing else.
    const stored = await jobIds('silent_producer');
    expect(stored).toHaveLength(106);
    expect(stored.filter((id) => acknowledged.includes(id)).sort()).toEqual([...acknowledged].sort());
  });

  it("a client's own pool is bounded by default, migrate() is not: it waits out another migrator's lock longer than the bound", async () => {
    const tooShort = optionError(() => new AwaClient({ connectionString: db.url, queryTimeoutMs: 50 }));
    expect([tooShort.code, tooShort.field]).toEqual(['AWA_INVALID_OPTION', 'queryTimeoutMs']);
    const bounded = new AwaClient({ connectionString: db.url, poolSize: 1 });
    try {
      const { rows } = await bounded.pool.query<{ statement_timeout: string }>('show statement_timeout');
      expect(rows[0]!.statement_timeout).toBe('30s');
    } finally {
      await bounded.close();
    }

    producer = new AwaClient({ connectionString: db.url, poolSize: 1, queryTimeoutMs: QUERY_TIMEOUT_MS });
    const lockKey = `awa:migrate:${producer.schema.name}`;
    const holder = await admin.connect();
    try {
      await holder.query('select pg_advisory_lock(hashtext($1))', [lockKey]);
      // The same wait on the client's pool is cancelled by the server at the bound (57014)…
      const onPool = await elapsed(producer.pool.query('select pg_advisory_lock(hashtext($1))', [lockKey]));
      expect(codeOf(onPool.outcome)).toBe('57014');
      // …and migrate() waits for the lock however long it is held, here 2.5 bounds.
      const migrating = elapsed(producer.migrate());
      await new Promise((r) => setTimeout(r, 2.5 * QUERY_TIMEOUT_MS));
      await holder.query('select pg_advisory_unlock(hashtext($1))', [lockKey]);
      const migrated = await migrating;
      expect(migrated.outcome.status).toBe('fulfilled');
      expect(migrated.ms).toBeGreaterThanOrEqual(2.4 * QUERY_TIMEOUT_MS);
    } finally {
      await holder.query('select pg_advisory_unlock_all()').catch(() => {});
      holder.release();
    }
  });

  it("a host whose start() meets a silent database fails with AWA_DATABASE_UNRESPONSIVE, not pg's bare message", async () => {
    proxy = await startSilentProxy(db.url);
    // A pool of the user's, bounded by the user (a host adds no bound to a pool it is given).
    const pool = new pg.Pool({ connectionString: proxy.url, max: 3, query_timeout: 1_500 });
    pool.on('error', () => {});
    try {
      // One idle connection, which the host's start checks out first (pg-pool hands out idle ones before
      // opening more).
      await pool.query('select 1');
      expect(proxy.silence()).toBe(1);
      const host = new WorkerHost({ pool, queues: { silent_start: 1 }, shutdownTimeoutMs: 1_000 });
      const started = await elapsed(host.start());
      expect(codeOf(started.outcome)).toBe('AWA_DATABASE_UNRESPONSIVE');
      expect(started.ms).toBeLessThan(GIVE_UP_WITHIN_MS);
      await host.stop();
      // The silent connection was discarded, not handed back to the pool.
      expect(pool.totalCount).toBe(0);
    } finally {
      await pool.end();
    }
  });
});
