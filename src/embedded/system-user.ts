import { spawnSync } from 'node:child_process';
import { EmbeddedPostgresError } from './errors.js';

// PostgreSQL refuses to run as root. When we are root (containers, CI), initdb and the server run as
// an unprivileged `postgres` system user, created on machines that have none.

export interface RunAs {
  uid: number;
  gid: number;
}

const USER = 'postgres';

function lookup(name: string): RunAs | null {
  // `id` rather than parsing /etc/passwd: it also sees users from NSS sources (LDAP, sssd).
  const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return null;
  const ids = { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  return Number.isInteger(ids.uid) && Number.isInteger(ids.gid) ? ids : null;
}

/** The user the server runs as: null when we are not root (it then runs as us). */
export function serverUser(): RunAs | null {
  if (process.getuid?.() !== 0) return null;
  const existing = lookup(USER);
  if (existing) return existing;
  const made = spawnSync(
    'useradd',
    ['--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', USER],
    { encoding: 'utf8' },
  );
  const created = lookup(USER);
  if (created) return created;
  const why = made.error?.message ?? (made.stderr.trim() || `useradd exited with ${made.status}`);
  throw new EmbeddedPostgresError(
    `Running as root, the embedded PostgreSQL needs an unprivileged "${USER}" user, and creating it failed (${why}). ` +
      `Create that user yourself (e.g. "useradd --system ${USER}"), run as a non-root user, or set DATABASE_URL to use your own server.`,
  );
}
