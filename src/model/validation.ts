import { InvalidOptionError } from './errors.js';

// Field validators shared by job definitions, enqueue options and worker configuration. Each names the
// field it rejects, so the error says exactly which input to fix.

export type Priority = 1 | 2 | 3 | 4;

const MAX_NAME = 200;

export function validateName(field: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new InvalidOptionError(field, `must be a non-empty string, got ${describe(value)}`);
  }
  if (value.length > MAX_NAME) throw new InvalidOptionError(field, `must be at most ${MAX_NAME} characters`);
  // C0, DEL and C1: a name is printed in terminals, logs and pages, where these would act, not show.
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(value))
    throw new InvalidOptionError(field, 'must not contain control characters');
  if (!value.isWellFormed()) throw new InvalidOptionError(field, 'must not contain a lone UTF-16 surrogate');
  return value;
}

export function validatePriority(field: string, value: unknown): Priority {
  if (value === 1 || value === 2 || value === 3 || value === 4) return value;
  throw new InvalidOptionError(field, `must be 1, 2, 3 or 4 (1 is most urgent), got ${describe(value)}`);
}

export function validateMaxAttempts(field: string, value: unknown): number {
  return validateInt(field, value, 1, 1000);
}

export function validateInt(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidOptionError(field, `must be an integer from ${min} to ${max}, got ${describe(value)}`);
  }
  return value;
}

export function validatePositive(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidOptionError(field, `must be a positive number, got ${describe(value)}`);
  }
  return value;
}

export function validateDate(field: string, value: unknown): Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new InvalidOptionError(field, `must be a valid Date, got ${describe(value)}`);
  }
  return value;
}

export function validatePlainObject(field: string, value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidOptionError(field, `must be a plain object, got ${describe(value)}`);
  }
  return value as Record<string, unknown>;
}

export function validateTags(field: string, value: unknown): string[] {
  if (!Array.isArray(value) || value.length > 20) {
    throw new InvalidOptionError(field, 'must be an array of at most 20 strings');
  }
  for (const tag of value) {
    if (typeof tag !== 'string' || tag.length === 0 || tag.length > 100) {
      throw new InvalidOptionError(
        field,
        `each tag must be a string of 1 to 100 characters, got ${describe(tag)}`,
      );
    }
  }
  return value as string[];
}

/** Rejects keys the caller passed that the option type does not know (typos like `prority`). */
export function rejectUnknownKeys(field: string, value: object, known: readonly string[]): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      throw new InvalidOptionError(`${field}.${key}`, `is not a known option (known: ${known.join(', ')})`);
    }
  }
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value instanceof Date) return `Date(${value.toString()})`;
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint')
    return String(value);
  return Array.isArray(value) ? 'an array' : typeof value;
}

/** True for a job id as the engine writes it: the digits of a positive bigint. */
export function isJobId(value: unknown): value is string {
  return typeof value === 'string' && /^\d{1,19}$/.test(value);
}

/** A job's id as the client's reads and actions take it: the id string, or what enqueue() returned
 * (`{ id, inserted }`). Anything else is a typed error here rather than a database error later. */
export function validateJobId(field: string, value: unknown): string {
  const id =
    typeof value === 'object' && value !== null && 'id' in value ? (value as { id: unknown }).id : value;
  if (isJobId(id)) return id;
  throw new InvalidOptionError(
    field,
    `must be a job id (a string of digits) or what enqueue() returned ({ id }), got ${describe(value)}`,
  );
}
