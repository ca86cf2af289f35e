import { AwaError } from '../model/errors.js';

/**
 * The embedded PostgreSQL could not be prepared, started or stopped. One stable code for the whole
 * launcher so callers (the demo, the test setup) can branch on it; the message says what to try.
 */
export class EmbeddedPostgresError extends AwaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('AWA_EMBEDDED_START_FAILED', message, options);
  }
}

/**
 * A file or directory the launcher would read or write as itself (root, typically) is not what it
 * must be: a symlink, a FIFO, a hard link or someone else's file where only a plain file of ours
 * belongs, or a directory another user could change. Nothing was written through it.
 */
export class UnsafePathError extends EmbeddedPostgresError {
  readonly path: string;
  constructor(path: string, why: string, todo: string, options?: { cause?: unknown }) {
    super(`Refusing to use ${path}: ${why}. ${todo}`, options);
    this.path = path;
  }
}

/**
 * The copy of the PostgreSQL binaries the server user would run does not match the installed ones
 * (damaged, changed after it was made, or a different build left under the same name). Nothing ran
 * from it.
 */
export class BinaryCopyMismatchError extends EmbeddedPostgresError {
  readonly copyDir: string;
  /** What differs, e.g. "bin/postgres differs from the source". */
  readonly problem: string;
  constructor(copyDir: string, sourceDir: string, problem: string) {
    super(
      `The PostgreSQL binaries in ${copyDir} do not match those in ${sourceDir}: ${problem}. Refusing to run them. ` +
        `Remove ${copyDir} and start again (a fresh copy is made), or set DATABASE_URL to use your own server.`,
    );
    this.copyDir = copyDir;
    this.problem = problem;
  }
}
