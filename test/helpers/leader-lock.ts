import type pg from 'pg';

// Who holds the maintenance-leader lock, from pg_locks: the database's own word on leadership, rather
// than the hosts' flags. The lock is the session advisory lock (lock_ns('leader'), 0) of the schema;
// the key comes from the engine's lock_ns() SQL function, so if the engine changes how it keys the
// lock, this is the one place to adapt.

export interface LockHolder {
  pid: number;
  applicationName: string;
}

/** Backends of the current database holding the leader lock of `schema` (granted; at most one if sound). */
export async function leaderLockHolders(db: pg.Pool | pg.ClientBase, schema = 'awa'): Promise<LockHolder[]> {
  const ns = await db.query<{ ns: number }>(`select "${schema}".lock_ns('leader') as ns`);
  const { rows } = await db.query<{ pid: number; application_name: string }>(
    // pg_locks shows the two int4 keys of pg_advisory_lock(int4, int4) as classid / objid (unsigned)
    // with objsubid 2.
    `select l.pid, a.application_name
       from pg_locks l join pg_stat_activity a on a.pid = l.pid
      where l.locktype = 'advisory' and l.granted and l.objsubid = 2
        and l.database = (select oid from pg_database where datname = current_database())
        and l.classid = ($1::bigint & 4294967295)::oid and l.objid = 0
      order by l.pid`,
    [ns.rows[0]!.ns],
  );
  return rows.map((r) => ({ pid: r.pid, applicationName: r.application_name }));
}
