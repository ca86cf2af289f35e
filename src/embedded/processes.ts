import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { EmbeddedPostgresError } from './errors.js';
import type { RunAs } from './system-user.js';

// Small process utilities for the launcher: running a binary to completion as the server user, and
// asking whether a pid is still a live process.

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

/**
 * Runs a command to completion and collects stdout+stderr. A failure to spawn at all (EACCES, ENOENT)
 * arrives as an 'error' event, which would crash the process if unhandled: here it rejects instead.
 */
export function run(command: string, args: readonly string[], runAs: RunAs | null): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const fail = (err: Error) =>
      reject(new EmbeddedPostgresError(`Could not run ${command}: ${err.message}`, { cause: err }));
    let child;
    try {
      child = spawn(command, args, {
        uid: runAs?.uid,
        gid: runAs?.gid,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      fail(err as Error);
      return;
    }
    const chunks: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => chunks.push(c));
    child.stderr.on('data', (c: Buffer) => chunks.push(c));
    child.once('error', fail);
    child.once('close', (code, signal) =>
      resolve({ code, signal, output: Buffer.concat(chunks).toString('utf8').trim() }),
    );
  });
}

/** True while `pid` names a process (a zombie counts: it still holds its pid). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists but belongs to someone else.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * True when `pid` is a live process that is not a zombie. A child that exited but was not reaped yet
 * (our own postmaster while the event loop cannot run, e.g. in an 'exit' hook) still answers kill(0).
 */
export function isRunning(pid: number): boolean {
  if (!isAlive(pid)) return false;
  try {
    // Linux: field 3 of /proc/<pid>/stat, after the parenthesised command name, is the state.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.charAt(stat.lastIndexOf(')') + 2) !== 'Z';
  } catch {
    return true;
  }
}

/** The effective uid a process runs as, or null when it cannot be told. */
export function processUid(pid: number): number | null {
  let text: string | null = null;
  try {
    // Linux: "Uid:\t<real>\t<effective>\t<saved>\t<filesystem>".
    text = /^Uid:\s+\d+\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? null;
  } catch {
    // No procfs (macOS): ask ps.
    const ps = spawnSync('ps', ['-p', String(pid), '-o', 'uid='], { encoding: 'utf8' });
    text = ps.status === 0 ? ps.stdout.trim() : null;
  }
  const uid = Number(text);
  return text !== null && text !== '' && Number.isInteger(uid) ? uid : null;
}

/** The command line of a running process, or null when it cannot be read. */
export function commandLine(pid: number): string | null {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    // No procfs (macOS): ask ps.
    const ps = spawnSync('ps', ['-p', String(pid), '-o', 'command='], { encoding: 'utf8' });
    return ps.status === 0 && ps.stdout.trim() !== '' ? ps.stdout.trim() : null;
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Blocks the thread for `ms`: only for the synchronous 'exit' hook, where timers never fire. */
export function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
