import { InvalidOptionError } from '../model/errors.js';

// The schema an Awa installation lives in. Everything that puts the name into SQL goes through here, so
// quoting is decided once.

export const DEFAULT_SCHEMA = 'awa';

export interface Schema {
  readonly name: string;
  /** Quoted identifier, safe to splice into SQL. */
  readonly ident: string;
  /** NOTIFY channel carrying queue names that got new jobs. */
  readonly jobsChannel: string;
}

export function resolveSchema(name: string = DEFAULT_SCHEMA): Schema {
  if (typeof name !== 'string' || !/^[a-z_][a-z0-9_]{0,40}$/.test(name)) {
    throw new InvalidOptionError(
      'schema',
      `must be a lowercase identifier of up to 41 characters (letters, digits, _), got ${JSON.stringify(name)}`,
    );
  }
  const ident = `"${name}"`;
  // Must match the channel the SQL functions notify on: 'awa:{{schema}}' with the quoted name.
  return { name, ident, jobsChannel: `awa:${ident}` };
}
