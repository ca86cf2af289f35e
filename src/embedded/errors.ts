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
