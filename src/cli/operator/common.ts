import type { ReadLag } from '../../storage/index.js';
import { AwaClient } from '../../roles.js';
import { cliActor } from '../actor.js';
import { parseArgs, type OptionSpec, type Parsed } from '../args.js';
import { connectionOptions, DB_OPTIONS, POOLER_OPTIONS, READ_OPTIONS, readOptions } from '../database-url.js';
import type { CliContext } from '../io.js';

// What the operator commands share: the database options, a client for one command, and printing (a table
// for people, JSON with --json).

export const OPERATOR_OPTIONS: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  json: { type: 'boolean', description: 'print JSON' },
  ...POOLER_OPTIONS,
  ...READ_OPTIONS,
};

export async function withClient<T>(
  ctx: CliContext,
  values: Parsed['values'],
  fn: (client: AwaClient) => Promise<T>,
): Promise<T> {
  const client = new AwaClient({
    ...connectionOptions(values, ctx.env),
    ...readOptions(values, ctx.env),
    schema: values.schema as string | undefined,
    poolSize: 2,
    // Each action is recorded in the audit trail as this user; the command prints what it did, so the record
    // is not printed again.
    actor: cliActor(ctx.env),
    onAudit: () => {},
  });
  try {
    // An unmigrated database is named as such (run `awa migrate`), not as the first missing table or function.
    await client.assertMigrated();
    const result = await fn(client);
    // What was read may be older than the primary: say by how much, on stderr (stdout stays the answer).
    if (readOptions(values, ctx.env).readConnectionString !== undefined)
      ctx.err(lagLine(await client.readLag()));
    return result;
  } finally {
    await client.close();
  }
}

/** The line that says where the reads came from: `read from a replica, caught up` / `…, 1.2s behind`. */
export function lagLine(lag: ReadLag): string {
  if (lag.reads === 'primary') return 'read from the primary';
  if (lag.reads === 'other') return 'read from a server that is not a standby: its lag is unknown';
  if (lag.lagMs === 0) return 'read from a replica, caught up';
  return `read from a replica, ${lag.lagMs === null ? 'an unknown time' : ago(new Date(Date.now() - lag.lagMs))} behind`;
}

export function parse(argv: readonly string[], extra: Record<string, OptionSpec> = {}): Parsed {
  return parseArgs(argv, { ...OPERATOR_OPTIONS, ...extra });
}

/** Prints `json` as JSON with --json, else `human` (a string, or rows as a table). */
export function print(
  ctx: CliContext,
  values: Parsed['values'],
  json: unknown,
  human: string | readonly object[],
): void {
  ctx.out(values.json ? JSON.stringify(json) : typeof human === 'string' ? human : table(human));
}

export function table(rows: readonly object[], empty = '(none)'): string {
  if (rows.length === 0) return empty;
  const cols = Object.keys(rows[0]!);
  const cell = (r: object, c: string) => show((r as Record<string, unknown>)[c]);
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r, c).length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(width[i]!))
      .join('  ')
      .trimEnd();
  return [line(cols), ...rows.map((r) => line(cols.map((c) => cell(r, c))))].join('\n');
}

function show(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (v instanceof Date) return v.toISOString();
  if (Array.isArray(v)) return v.join(',');
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** A duration for people: 850ms, 12.3s, 4m05s, 2h10m. */
export function ago(since: Date | null, now = Date.now()): string {
  if (!since) return '-';
  const ms = now - since.getTime();
  if (ms < 1_000) return `${Math.max(ms, 0)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  if (ms < 3_600_000)
    return `${Math.floor(ms / 60_000)}m${String(Math.floor((ms % 60_000) / 1000)).padStart(2, '0')}s`;
  return `${Math.floor(ms / 3_600_000)}h${String(Math.floor((ms % 3_600_000) / 60_000)).padStart(2, '0')}m`;
}
