import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

// Table statistics (pg_stat_user_tables) that can be trusted in an assertion.
//
// A backend keeps its row counters locally and flushes them to shared memory at most about once a
// second while it runs, and always when it exits. It flushes them before it leaves pg_stat_activity
// (the stats shutdown hook runs before the hook that clears the backend's status entry), so once every
// session that wrote is gone from pg_stat_activity, its writes are all counted. Counting on an idle
// flush instead would let a test read zero updates that simply have not been flushed yet.
// This holds from PostgreSQL 15 (statistics in shared memory). On 14 a backend sends its counters to the
// statistics collector, which applies them asynchronously: callers also check that writes they know of
// are counted (e.g. exactly N enqueue inserts), which fails rather than passes when they are not.

export interface TableStats {
  relname: string;
  ins: number;
  upd: number;
  del: number;
  dead: number;
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url, application_name: 'awa-test-stats' });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/**
 * Waits until no session is connected to `url`'s database except the ones whose application_name is
 * in `keep` (and this helper's own). Fails, naming the sessions left, after `timeoutMs`.
 */
export async function waitForSessionsToEnd(
  url: string,
  keep: readonly string[] = [],
  timeoutMs = 15_000,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  const left = await withClient(url, async (c) => {
    for (;;) {
      const { rows } = await c.query<{ pid: number; application_name: string; state: string | null }>(
        `select pid, application_name, state from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid()
            and backend_type = 'client backend' and not (application_name = any($1::text[]))`,
        [keep],
      );
      if (rows.length === 0 || Date.now() > until) return rows;
      await sleep(25);
    }
  });
  if (left.length > 0)
    throw new Error(`sessions still connected after ${timeoutMs} ms: ${JSON.stringify(left)}`);
}

/** Cumulative row counters of every table in `schema`, keyed by table name, read on a fresh session. */
export async function readTableStats(url: string, schema = 'awa'): Promise<Map<string, TableStats>> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<TableStats>(
      `select relname, n_tup_ins::int as ins, n_tup_upd::int as upd, n_tup_del::int as del,
              n_dead_tup::int as dead
         from pg_stat_user_tables where schemaname = $1`,
      [schema],
    );
    return new Map(rows.map((r) => [r.relname, r]));
  });
}

/** Sum of one counter over the tables whose name matches `family` (e.g. /^ready_entries_\d+$/). */
export function sumOf(
  stats: Map<string, TableStats>,
  family: RegExp,
  k: 'ins' | 'upd' | 'del' | 'dead',
): number {
  let n = 0;
  for (const s of stats.values()) if (family.test(s.relname)) n += s[k];
  return n;
}

/**
 * Index entries and rows this backend has read in the engine's schema so far in its transaction (the counters a
 * backend keeps before it flushes them): read before and after a call in one transaction, the difference is
 * what the call read, counted by PostgreSQL rather than timed.
 */
export async function readsSoFar(c: pg.ClientBase, schema = 'awa'): Promise<number> {
  const { rows } = await c.query<{ reads: number }>(
    `select coalesce(sum(pg_stat_get_xact_tuples_returned(k.oid) + pg_stat_get_xact_tuples_fetched(k.oid)), 0)::int
              as reads
       from pg_class k join pg_namespace s on s.oid = k.relnamespace
      where s.nspname = $1 and k.relkind in ('r', 'i')`,
    [schema],
  );
  return rows[0]!.reads;
}
