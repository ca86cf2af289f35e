import {
  closeSync,
  constants,
  fchownSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { dirname } from 'node:path';
import { UnsafePathError } from './errors.js';
import type { RunAs } from './system-user.js';

// File access for the launcher's own files (server log, pidfile, password). Run as root, the launcher
// shares the machine with a server user that owns the data directory, and anything running as that user
// can plant a symlink, a hard link or a FIFO where it expects us to write. So our files live in a
// private directory of our own (never inside the data directory), every open refuses to follow a final
// symlink and to block on a FIFO, and an opened file is checked (fstat) to be a plain file of ours with
// one name before a byte is read or written.

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_APPEND, O_TRUNC, O_WRONLY, O_RDONLY } = constants;

/** The uid whose files we trust: this process's. */
export const ownUid = (): number => process.getuid?.() ?? -1;

function code(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}

/** Opens with O_NOFOLLOW and O_NONBLOCK (a FIFO must not hang us), then checks what was opened. */
function openChecked(path: string, flags: number, mode: number, owner: number | null): number {
  let fd: number;
  try {
    fd = openSync(path, flags | O_NOFOLLOW | O_NONBLOCK, mode);
  } catch (err) {
    // ELOOP: the last component is a symlink. ENXIO: a FIFO with no reader.
    if (code(err) === 'ELOOP' || code(err) === 'ENXIO') throw refuse(path, 'it is a symlink or a FIFO', err);
    throw err;
  }
  try {
    const st = fstatSync(fd);
    const why = !st.isFile()
      ? 'it is not a regular file'
      : owner !== null && st.uid !== owner
        ? `it belongs to uid ${st.uid}, not ${owner}`
        : st.nlink !== 1
          ? `it has ${st.nlink} hard links`
          : null;
    if (why) throw refuse(path, why);
    return fd;
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

function refuse(path: string, why: string, cause?: unknown): UnsafePathError {
  return new UnsafePathError(path, why, 'Someone else may have put it there: remove it and try again.', {
    cause,
  });
}

/** Opens (creating it, mode 0600) a file of ours for writing: the fd a server writes its log to. */
export function openOwnFile(path: string, mode: 'truncate' | 'append'): number {
  return openChecked(path, O_WRONLY | O_CREAT | (mode === 'truncate' ? O_TRUNC : O_APPEND), 0o600, ownUid());
}

/**
 * Creates `path` (it must not exist: O_EXCL), writes `text` and, when `owner` is given, hands the file
 * to that user through the open fd, never by path.
 */
export function writeNewFile(path: string, text: string, owner: RunAs | null = null): void {
  const fd = openChecked(path, O_WRONLY | O_CREAT | O_EXCL, 0o600, ownUid());
  try {
    writeSync(fd, text);
    if (owner) fchownSync(fd, owner.uid, owner.gid);
  } finally {
    closeSync(fd);
  }
}

/** Replaces a file of ours: unlink (never follows a link) and create afresh. */
export function replaceOwnFile(path: string, text: string): void {
  removeFile(path);
  writeNewFile(path, text);
}

export function removeFile(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if (code(err) !== 'ENOENT') throw err;
  }
}

/**
 * The first `max` bytes of a file, or null when there is none. `owner` null reads a file someone else
 * owns (PostgreSQL's postmaster.pid): still no symlink, FIFO or hard link is followed.
 */
export function readSmallFile(path: string, owner: number | null = ownUid(), max = 4096): string | null {
  let fd: number;
  try {
    fd = openChecked(path, O_RDONLY, 0, owner);
  } catch (err) {
    if (code(err) === 'ENOENT') return null;
    throw err;
  }
  try {
    const buf = Buffer.alloc(max);
    const n = readSync(fd, buf, 0, max, 0);
    return buf.subarray(0, n).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * Makes (or accepts) `dir` as a directory only we can use: a real directory, not a symlink, owned by
 * us, with no access for group or others. Its parent must not be writable by other users either,
 * or one of them could swap the directory for a link of their own after this check.
 */
export function ensurePrivateDir(dir: string): void {
  checkParent(dirname(dir));
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if (code(err) !== 'EEXIST') throw err;
  }
  const st = lstatSync(dir);
  const why = st.isSymbolicLink()
    ? 'it is a symlink'
    : !st.isDirectory()
      ? 'it is not a directory'
      : st.uid !== ownUid()
        ? `it belongs to uid ${st.uid}, not ${ownUid()}`
        : (st.mode & 0o077) !== 0
          ? `its mode is ${(st.mode & 0o777).toString(8)}, not 700`
          : null;
  if (why) {
    throw new UnsafePathError(
      dir,
      why,
      'The launcher keeps its own files there and creates it itself: remove it, or choose another dataDir.',
    );
  }
}

/**
 * Only root or we may rename entries in `dir`: it belongs to one of us and is not writable by group
 * or others, unless its sticky bit keeps them from touching entries they do not own (like /tmp).
 */
export function checkParent(dir: string): void {
  const st = statSync(dir);
  const ownerOk = st.uid === 0 || st.uid === ownUid();
  const writableByOthers = (st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0;
  if (!ownerOk || writableByOthers) {
    throw new UnsafePathError(
      dir,
      `it belongs to uid ${st.uid} with mode ${(st.mode & 0o7777).toString(8)}, so another user could swap the launcher's files in it`,
      'Put the data directory in a directory that only root or you can write (or a sticky one, like /tmp).',
    );
  }
}
