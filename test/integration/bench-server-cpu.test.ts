import { existsSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerCpu } from '../../bench/server-cpu.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// The bench's PostgreSQL CPU figure (pgCpuUsPerJob) is the difference of two totals. A backend that burns
// CPU and exits between them must still be counted: the drain's connections, and any other database's
// clients, come and go inside a measured stretch. (Before the postmaster's reaped-children time was added, a
// stretch whose backends exited could even come out negative: the suite once failed on -330 µs per job.)
// The test server runs on this machine, as bench.test.ts also assumes.

/** A process's own user + system CPU so far, in ms (USER_HZ ticks of 10 ms). */
function ownCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

describe('bench: PostgreSQL CPU over a stretch', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('server_cpu');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('counts the CPU of a backend that exited inside the stretch', async () => {
    const cpu = await ServerCpu.open(db.url);
    expect(cpu, 'the test server is local').not.toBeNull();
    const before = await cpu!.totalMs();

    const backend = new pg.Client({ connectionString: db.url });
    await backend.connect();
    const { rows } = await backend.query<{ pid: number }>('select pg_backend_pid() as pid');
    const pid = rows[0]!.pid;
    await backend.query('select count(*) from generate_series(1, 5000000)');
    const burnedMs = ownCpuMs(pid);
    await backend.end();
    await until('the backend to be gone', async () => !existsSync(`/proc/${pid}`));

    // At least a tenth of a second (so the check below means something), all of it inside the stretch.
    expect(burnedMs).toBeGreaterThanOrEqual(100);
    expect((await cpu!.totalMs()) - before).toBeGreaterThanOrEqual(burnedMs);
  });
});
