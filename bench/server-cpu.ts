import { readdir, readFile } from 'node:fs/promises';
import { benchClient } from './database.js';

// PostgreSQL's CPU time over a measured stretch, when the server runs on this machine: the user + system
// time of every `postgres` process of the server's operating-system user (backends, WAL writer,
// checkpointer, autovacuum), read from /proc. A backend that exits inside the stretch takes its time with
// it, so measure while the system's connections are still open. Where the server is not local (or there is
// no /proc), open() returns null and nothing is reported.

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

  /** CPU milliseconds the server's live processes have used so far. */
  async totalMs(): Promise<number> {
    let ticks = 0;
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      const [stat, status] = await Promise.all([
        readFile(`/proc/${pid}/stat`, 'utf8').catch(() => ''),
        readFile(`/proc/${pid}/status`, 'utf8').catch(() => ''),
      ]);
      if (!stat.includes('(postgres)') || /^Uid:\s+(\d+)/m.exec(status)?.[1] !== this.uid) continue;
      // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    }
    return (ticks * 1000) / TICKS_PER_SECOND;
  }
}
