import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { commandLine, isRunning, sleep } from './processes.js';

// If the Node process that started a server was SIGKILLed, its postmaster keeps running and keeps the
// data directory locked. We record the postmaster's pid in our own pidfile (PostgreSQL's own
// postmaster.pid is checked as well) and, before starting on that directory again, stop whatever
// postmaster is still serving it.

const PIDFILE = 'awa-embedded.pid';

export function writePidfile(dataDir: string, pid: number): void {
  writeFileSync(join(dataDir, PIDFILE), `${pid}\n`);
}

export function removePidfile(dataDir: string): void {
  rmSync(join(dataDir, PIDFILE), { force: true });
}

function pidIn(file: string): number | null {
  try {
    const pid = Number(readFileSync(file, 'utf8').split('\n', 1)[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

/** A recorded pid still names the postmaster of `dataDir` (not a process that reused the number). */
function servesDir(pid: number, dataDir: string): boolean {
  if (pid === process.pid || !isRunning(pid)) return false;
  const cmd = commandLine(pid);
  return cmd !== null && /postgres/.test(cmd) && cmd.includes(dataDir);
}

async function waitGone(pid: number, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (isRunning(pid)) {
    if (Date.now() >= until) return false;
    await sleep(25);
  }
  return true;
}

/** Stops a postmaster left running on `dataDir` by a process that died without stopping it. */
export async function stopStalePostmaster(dataDir: string, log: (line: string) => void): Promise<void> {
  const pids = new Set([pidIn(join(dataDir, PIDFILE)), pidIn(join(dataDir, 'postmaster.pid'))]);
  for (const pid of pids) {
    if (pid === null || !servesDir(pid, dataDir)) continue;
    log(`stopping stale postmaster ${pid} left running on ${dataDir}`);
    // Immediate shutdown: nobody is meant to be connected to an orphan, and it is quick.
    process.kill(pid, 'SIGQUIT');
    if (!(await waitGone(pid, 10_000))) {
      process.kill(pid, 'SIGKILL');
      await waitGone(pid, 5_000);
    }
  }
  removePidfile(dataDir);
}
