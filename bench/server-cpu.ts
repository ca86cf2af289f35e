import { readdir, readFile } from 'node:fs/promises';
import { benchClient } from './database.js';

// PostgreSQL's CPU time over a measured stretch, when the server runs on this machine: the user + system
// time of the server's postmaster and of every process it started (backends, WAL writer, checkpointer,
// autovacuum), read from /proc, plus the time of its children that have exited (the postmaster's
// cutime/cstime holds every backend it has reaped). Without the latter, a backend that exits inside the
// stretch (any database's: other clients come and go) would take its time with it and could make the
// stretch's total negative. Only this server's processes count: another PostgreSQL on the machine (an
// embedded cluster of a test, say) that stops inside the stretch would take its processes' time, and its
// reaped children's, out of a total that counted them. Where the server is not local (or there is no
// /proc), open() returns null and nothing is reported. processCpuMs() reads one live process the same way (the
// limits bench's host processes).

/** Linux's USER_HZ: /proc reports CPU time in these ticks (100 a second on every mainstream architecture). */
const TICKS_PER_SECOND = 100;

export class ServerCpu {
  private constructor(private readonly postmaster: string) {}

  /** Finds the server's postmaster through a backend of `url`'s database, or null when it is not local. */
  static async open(url: string): Promise<ServerCpu | null> {
    const client = benchClient(url);
    await client.connect();
    try {
      const { rows } = await client.query<{ pid: number; db: string }>(
        'select pg_backend_pid() as pid, current_database() as db',
      );
      const { pid, db } = rows[0]!;
      // The pid must be this backend here: a postgres process whose title names the database; its parent
      // is the postmaster.
      const [cmdline, backend] = await Promise.all([
        readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => ''),
        postgresFields(String(pid)),
      ]);
      if (!backend || !cmdline.includes(db)) return null;
      const postmaster = String(backend.ppid);
      return (await postgresFields(postmaster)) ? new ServerCpu(postmaster) : null;
    } finally {
      await client.end();
    }
  }

  /** CPU milliseconds the server's processes, live and exited, have used so far. */
  async totalMs(): Promise<number> {
    let ticks = 0;
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid) || pid === this.postmaster) continue;
      const fields = await postgresFields(pid);
      if (fields && String(fields.ppid) === this.postmaster) ticks += fields.utime + fields.stime;
    }
    // The postmaster is read after its children: a backend that exits during the scan is then counted once
    // or twice (live, then among the reaped), never missed (which could make a stretch's total go down).
    const own = await postgresFields(this.postmaster);
    if (own) ticks += own.utime + own.stime + own.cutime + own.cstime;
    return (ticks * 1000) / TICKS_PER_SECOND;
  }
}

/** A process's command name, parent and CPU ticks from /proc/<pid>/stat, or null when it has gone. */
async function statFields(pid: string): Promise<{
  comm: string;
  ppid: number;
  utime: number;
  stime: number;
  cutime: number;
  cstime: number;
} | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  if (!stat) return null;
  // The fields after the command name (which may hold spaces): the state, the parent's pid, …; utime and
  // stime, then the reaped children's cutime and cstime are the 12th to 15th.
  const f = stat
    .slice(stat.lastIndexOf(')') + 2)
    .split(' ')
    .map(Number);
  const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
  return { comm, ppid: f[1]!, utime: f[11]!, stime: f[12]!, cutime: f[13]!, cstime: f[14]! };
}

/** A postgres process's fields (statFields()), or null when it is not one (or has gone). */
async function postgresFields(pid: string) {
  const fields = await statFields(pid);
  return fields?.comm === 'postgres' ? fields : null;
}

/** CPU milliseconds a live process (all its threads) has used so far, or null when it has gone. */
export async function processCpuMs(pid: number): Promise<number | null> {
  const fields = await statFields(String(pid));
  return fields ? ((fields.utime + fields.stime) * 1000) / TICKS_PER_SECOND : null;
}
