import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, rmdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { EmbeddedPostgresError } from './errors.js';
import { checkParent, ensurePrivateDir } from './files.js';
import { run } from './processes.js';
import type { RunAs } from './system-user.js';

// Where a launched server keeps what. The data directory belongs to the server user (the `postgres`
// system user when we run as root). The launcher's own files, which root writes and reads (the
// server's log, our pidfile, the superuser password), never live in it: they go to a control directory
// beside it that only we can enter, so nothing the server user plants can redirect them.
//
//   launcher-chosen:  $TMPDIR/awa-pg-XXXXXX/        ours, 0711 (the server user may pass through, not list)
//                       data/                        the cluster, the server user's, 0700
//                       launcher/                    ours, 0700: server.log, postmaster.pid, password
//   dataDir given:    <dataDir>/  and  <dataDir>.awa/  (the same two, side by side)

export interface Layout {
  dataDir: string;
  controlDir: string;
  /** The directory holding both, when the launcher made it: destroy() removes it. */
  root: string | null;
}

export const CONTROL_SUFFIX = '.awa';

export function serverLog(layout: Layout): string {
  return join(layout.controlDir, 'server.log');
}

export function passwordFile(layout: Layout): string {
  return join(layout.controlDir, 'password');
}

export function pidFile(layout: Layout): string {
  return join(layout.controlDir, 'postmaster.pid');
}

export function makeLayout(dataDir: string | undefined, runAs: RunAs | null): Layout {
  if (dataDir === undefined) {
    checkParent(tmpdir());
    const root = mkdtempSync(join(tmpdir(), 'awa-pg-'));
    try {
      // Traversable by the server user (it needs to reach data/), listable and writable by nobody else.
      if (runAs) chmodSync(root, 0o711);
      const layout = { dataDir: join(root, 'data'), controlDir: join(root, 'launcher'), root };
      ensurePrivateDir(layout.controlDir);
      return layout;
    } catch (err) {
      rmSync(root, { recursive: true, force: true });
      throw err;
    }
  }
  // The directory the caller named, wherever its path leads today (its parent is what gets checked).
  let dir = resolve(dataDir);
  if (dir === dirname(dir)) {
    throw new EmbeddedPostgresError(`dataDir ${dataDir} is a filesystem root; pass a directory below one.`);
  }
  mkdirSync(dirname(dir), { recursive: true });
  dir = join(realpathSync(dirname(dir)), basename(dir));
  const layout = { dataDir: dir, controlDir: `${dir}${CONTROL_SUFFIX}`, root: null };
  ensurePrivateDir(layout.controlDir);
  return layout;
}

/**
 * Removes a launcher-made layout. As root the data directory is emptied by the server user itself: a
 * recursive delete by root through a tree another user can change under it could be steered (by
 * swapping a directory for a symlink mid-walk) into deleting files elsewhere. What remains (the empty
 * data directory, the control directory, the root) is ours alone.
 */
export async function removeLayout(layout: Layout, runAs: RunAs | null): Promise<void> {
  if (!layout.root) return;
  if (runAs) await run('rm', ['-rf', '--', layout.dataDir], runAs).catch(() => {});
  finishRemoval(layout, runAs);
}

/** removeLayout for the exit hook, where nothing can be awaited. */
export function removeLayoutSync(layout: Layout, runAs: RunAs | null): void {
  if (!layout.root) return;
  if (runAs)
    spawnSync('rm', ['-rf', '--', layout.dataDir], { uid: runAs.uid, gid: runAs.gid, stdio: 'ignore' });
  finishRemoval(layout, runAs);
}

function finishRemoval(layout: Layout, runAs: RunAs | null): void {
  const root = layout.root!;
  if (runAs) {
    try {
      rmdirSync(layout.dataDir); // never follows a link, fails on anything left inside
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') {
        throw new EmbeddedPostgresError(
          `Could not remove ${layout.dataDir} (${code}): the server user could not empty it, or something running as that user is still writing to it. ` +
            `Stop that and remove ${root} yourself.`,
          { cause: err },
        );
      }
    }
  }
  rmSync(root, { recursive: true, force: true });
}
