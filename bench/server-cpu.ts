import { readdir, readFile } from 'node:fs/promises';
import { benchClient } from './database.js';

// PostgreSQL's CPU time over a measured stretch, when the server runs on this machine: the user + system
// time of every `postgres` process of the server's operating-system user (backends, WAL writer,
// checkpointer, autovacuum), read from /proc, plus the time of their children that have exited (the
// postmaster's cutime/cstime holds every backend it has reaped). Without the latter, a backend that exits
// inside the stretch (any database's: other clients come and go) would take its time with it and could make
// the stretch's total negative. Where the server is not local (or there is no /proc), open() returns null
// and nothing is reported.

/** Linux's USER_HZ: /proc reports CPU time in these ticks (100 a second on every mainstream architecture). */
const TICKS_PER_SECOND = 100;

export class ServerCpu {
  private constructor(private readonly uid: string) {}

  /** Finds the server's processes through a backend of `url`'s database, or null when it is not local. */
  static async open(url: string): Promise<ServerCpu | null> {
    const client = benchClient(url);
    await client.connect();
    try {
      const { rows } = await client.query<{ pid: number; db: string }>(
        'select pg_backend_pid() as pid, current_database() as db',
      );
      const { pid, db } = rows[0]!;
      // The pid must be this backend here: a postgres process whose title names the database.
      const [comm, cmdline, status] = await Promise.all(
        ['comm', 'cmdline', 'status'].map((f) => readFile(`/proc/${pid}/${f}`, 'utf8').catch(() => '')),
      );
      const uid = /^Uid:\s+(\d+)/m.exec(status ?? '')?.[1];
      if (comm?.trim() !== 'postgres' || !cmdline?.includes(db) || uid === undefined) return null;
      return new ServerCpu(uid);
    } finally {
      await client.end();
    }
  }

  /** CPU milliseconds the server's processes, live and exited, have used so far. */
  async totalMs(): Promise<number> {
    const pids: string[] = [];
    let ticks = 0;
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      const [fields, status] = await Promise.all([
        statFields(pid),
        readFile(`/proc/${pid}/status`, 'utf8').catch(() => ''),
      ]);
      if (!fields || /^Uid:\s+(\d+)/m.exec(status)?.[1] !== this.uid) continue;
      pids.push(pid);
      ticks += fields.utime + fields.stime;
    }
    // The reaped children's time is read after every process's own: a backend that exits during the scan
    // is then counted once or twice, never missed (which could make a stretch's total go down).
    for (const pid of pids) {
      const fields = await statFields(pid);
      if (fields) ticks += fields.cutime + fields.cstime;
    }
    return (ticks * 1000) / TICKS_PER_SECOND;
  }
}

/** A postgres process's CPU ticks from /proc/<pid>/stat, or null when it is not one (or has gone). */
async function statFields(
  pid: string,
): Promise<{ utime: number; stime: number; cutime: number; cstime: number } | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  if (!stat.includes('(postgres)')) return null;
  // The fields after the command name (which may hold spaces): utime, stime, then the reaped children's
  // cutime and cstime are the 12th to 15th.
  const f = stat
    .slice(stat.lastIndexOf(')') + 2)
    .split(' ')
    .slice(11, 15)
    .map(Number);
  return { utime: f[0]!, stime: f[1]!, cutime: f[2]!, cstime: f[3]! };
}
