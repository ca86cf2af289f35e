import { AwaError } from '../model/errors.js';

/** The embedded PostgreSQL could not be prepared or started; the message says why and what to try. */
export class EmbeddedPostgresError extends AwaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('AWA_EMBEDDED_START_FAILED', message, options);
  }
}
