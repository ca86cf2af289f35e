import { spawnSync } from 'node:child_process';
import { EmbeddedPostgresError } from './errors.js';

// PostgreSQL refuses to run as root. When we are root, the server runs as the unprivileged `postgres`
// system user, created if the machine has none.

export interface RunAs {
  uid: number;
  gid: number;
}

function lookup(name: string): RunAs | null {
  const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return null;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Null when not root: the server simply runs as the current user. */
export function serverUser(): RunAs | null {
  if (process.getuid?.() !== 0) return null;
  const existing = lookup('postgres');
  if (existing) return existing;
  const made = spawnSync(
    'useradd',
    ['--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres'],
    {
      encoding: 'utf8',
    },
  );
  const created = lookup('postgres');
  if (!created) {
    throw new EmbeddedPostgresError(
      `Running as root, PostgreSQL needs an unprivileged "postgres" user and creating it failed: ${made.stderr || made.error?.message}. ` +
        'Create the user yourself, run as a normal user, or set DATABASE_URL.',
    );
  }
  return created;
}
