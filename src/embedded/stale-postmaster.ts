import { join } from 'node:path';
import { ownUid, readSmallFile, removeFile, replaceOwnFile } from './files.js';
import { pidFile, type Layout } from './layout.js';
import { commandLine, isRunning, processUid, sleep } from './processes.js';

// If the Node process that started a server was SIGKILLed, its postmaster keeps running and keeps the
// data directory locked. We record the postmaster's pid in our own pidfile (in the control directory,
// see layout.ts; PostgreSQL's own postmaster.pid is checked as well) and, before starting on that data
// directory again, stop whatever postmaster is still serving it. PostgreSQL's postmaster.pid is written
// by the server user, so a pid read from it is signalled only when that process runs as the server user
// too: root never signals anything that user could not have signalled itself.

export function writePidfile(layout: Layout, pid: number): void {
  replaceOwnFile(pidFile(layout), `${pid}\n`);
}

/** Never throws: it runs in the server's 'exit' listener, maybe after the control directory is gone. */
export function removePidfile(layout: Layout): void {
  try {
    removeFile(pidFile(layout));
  } catch {
    // Nothing to clean up, or nowhere to clean it up.
  }
}

function pidIn(text: string | null): number | null {
  const pid = Number((text ?? '').split('\n', 1)[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/** A recorded pid still names the postmaster of `dataDir` (not a process that reused the number). */
function servesDir(pid: number, dataDir: string, serverUid: number): boolean {
  if (pid === process.pid || !isRunning(pid) || processUid(pid) !== serverUid) return false;
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

function readPid(path: string, owner: number | null): number | null {
  try {
    return pidIn(readSmallFile(path, owner, 64));
  } catch {
    return null; // a symlink, FIFO or someone else's file where a pidfile should be: no pid from it
  }
}

/** Stops a postmaster left running on the layout's data directory by a process that died without stopping it. */
export async function stopStalePostmaster(
  layout: Layout,
  serverUid: number,
  log: (line: string) => void,
): Promise<void> {
  const { dataDir } = layout;
  const pids = new Set([readPid(pidFile(layout), ownUid()), readPid(join(dataDir, 'postmaster.pid'), null)]);
  for (const pid of pids) {
    if (pid === null || !servesDir(pid, dataDir, serverUid)) continue;
    log(`stopping stale postmaster ${pid} left running on ${dataDir}`);
    // Immediate shutdown: nobody is meant to be connected to an orphan, and it is quick.
    signalPid(pid, 'SIGQUIT');
    if (!(await waitGone(pid, 10_000))) {
      signalPid(pid, 'SIGKILL');
      await waitGone(pid, 5_000);
    }
  }
  removePidfile(layout);
}

function signalPid(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Gone meanwhile.
  }
}
