import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync } from 'node:fs';
import { chown, mkdir, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Binaries } from './binaries.js';
import { EmbeddedPostgresError } from './errors.js';
import { readSmallFile, replaceOwnFile, writeNewFile } from './files.js';
import { passwordFile, type Layout } from './layout.js';
import { run } from './processes.js';
import type { RunAs } from './system-user.js';

// Creates a database cluster in a data directory, or reuses one this launcher created before. The
// superuser password is kept in the launcher's control directory (see layout.ts), so a persistent
// data directory can be started again.

/** Where launchers before the control directory kept the password: inside the data directory. */
const LEGACY_PASSWORD_FILE = 'awa-embedded-password';

function readPassword(layout: Layout): string {
  const current = readSmallFile(passwordFile(layout))?.trim();
  if (current) return current;
  // Taken over once from a cluster an earlier launcher made. The server user owns that directory, so
  // the file is read only if it is still a plain file of ours (no symlink, FIFO or extra hard link).
  const legacy = readSmallFile(join(layout.dataDir, LEGACY_PASSWORD_FILE))?.trim();
  if (legacy) {
    replaceOwnFile(passwordFile(layout), `${legacy}\n`);
    return legacy;
  }
  throw new EmbeddedPostgresError(
    `${layout.dataDir} holds a PostgreSQL cluster this launcher did not create (there is no ${passwordFile(layout)}), so its password is unknown. ` +
      'Pass a different (empty or missing) dataDir, or connect to that server yourself with DATABASE_URL.',
  );
}

async function isEmptyDir(dir: string): Promise<boolean> {
  try {
    return (await readdir(dir)).length === 0;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw err;
  }
}

/** Returns the superuser password of the cluster in the layout's data directory, running initdb first when there is none. */
export async function ensureCluster(
  bin: Binaries,
  layout: Layout,
  runAs: RunAs | null,
  durable: boolean,
  log: (line: string) => void,
): Promise<string> {
  const { dataDir } = layout;
  if (existsSync(join(dataDir, 'PG_VERSION'))) return readPassword(layout);
  if (!(await isEmptyDir(dataDir))) {
    throw new EmbeddedPostgresError(
      `${dataDir} is neither empty nor a PostgreSQL data directory; refusing to initialise a cluster over its contents. ` +
        'Pass an empty or missing directory as dataDir.',
    );
  }
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  if (runAs) await chown(dataDir, runAs.uid, runAs.gid);

  const password = randomBytes(18).toString('base64url');
  // initdb wants the data directory empty and cannot enter our control directory, so it reads the
  // password from a directory of its own: ours, where nobody can plant anything while we write the file
  // (handed to the server user through the open fd), then opened for passing through (0711), not listing.
  const pwDir = mkdtempSync(join(tmpdir(), 'awa-initdb-pw-'));
  try {
    const pwFile = join(pwDir, 'pw');
    writeNewFile(pwFile, `${password}\n`, runAs);
    if (runAs) chmodSync(pwDir, 0o711);
    log(`initdb ${dataDir}`);
    const r = await run(
      bin.initdb,
      // prettier-ignore
      [
        '-D', dataDir,
        '-U', 'postgres',
        '--pwfile', pwFile,
        '--auth', 'scram-sha-256',
        '-E', 'UTF8',
        '--locale', 'C',
        // Skipping the fsyncs saves most of initdb's time; a durable cluster keeps them.
        ...(durable ? [] : ['--no-sync']),
      ],
      runAs,
    );
    if (r.code !== 0) {
      const hint = runAs
        ? `The "postgres" user (uid ${runAs.uid}) must be able to enter every parent directory of ${dataDir}; a directory under the temp dir always works.`
        : 'Check that the directory is writable and the disk has space.';
      throw new EmbeddedPostgresError(
        `initdb failed (${r.signal ?? `exit code ${r.code}`}) for ${dataDir}:\n${r.output}\n${hint}`,
      );
    }
  } finally {
    await rm(pwDir, { recursive: true, force: true });
  }
  replaceOwnFile(passwordFile(layout), `${password}\n`);
  return password;
}
