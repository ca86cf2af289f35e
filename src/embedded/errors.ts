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
