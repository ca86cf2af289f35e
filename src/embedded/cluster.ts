import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Binaries } from './binaries.js';
import { EmbeddedPostgresError } from './errors.js';
import { run } from './processes.js';
import type { RunAs } from './system-user.js';

// Creates a database cluster in a data directory, or reuses one this launcher created before. The
// superuser password lives beside the cluster so a persistent data directory can be started again.

const PASSWORD_FILE = 'awa-embedded-password';

async function own(path: string, runAs: RunAs | null): Promise<void> {
  if (runAs) await chown(path, runAs.uid, runAs.gid);
}

async function readPassword(dataDir: string): Promise<string> {
  try {
    return (await readFile(join(dataDir, PASSWORD_FILE), 'utf8')).trim();
  } catch (err) {
    throw new EmbeddedPostgresError(
      `${dataDir} holds a PostgreSQL cluster this launcher did not create (it has no ${PASSWORD_FILE} file), so its password is unknown. ` +
        'Pass a different (empty or missing) dataDir, or connect to that server yourself with DATABASE_URL.',
      { cause: err },
    );
  }
}

async function isEmptyDir(dir: string): Promise<boolean> {
  try {
    return (await readdir(dir)).length === 0;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw err;
  }
}

/** Returns the superuser password of the cluster in `dataDir`, running initdb first when there is none. */
export async function ensureCluster(
  bin: Binaries,
  dataDir: string,
  runAs: RunAs | null,
  durable: boolean,
  log: (line: string) => void,
): Promise<string> {
  if (existsSync(join(dataDir, 'PG_VERSION'))) return readPassword(dataDir);
  if (!(await isEmptyDir(dataDir))) {
    throw new EmbeddedPostgresError(
      `${dataDir} is neither empty nor a PostgreSQL data directory; refusing to initialise a cluster over its contents. ` +
        'Pass an empty or missing directory as dataDir.',
    );
  }
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await own(dataDir, runAs);

  const password = randomBytes(18).toString('base64url');
  // initdb wants the data directory empty, so the password file goes to a private directory of its own.
  const pwDir = await mkdtemp(join(tmpdir(), 'awa-initdb-pw-'));
  try {
    await own(pwDir, runAs);
    const pwFile = join(pwDir, 'pw');
    await writeFile(pwFile, `${password}\n`, { mode: 0o600 });
    await own(pwFile, runAs);
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
  await writeFile(join(dataDir, PASSWORD_FILE), `${password}\n`, { mode: 0o600 });
  return password;
}
