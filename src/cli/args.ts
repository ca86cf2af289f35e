// A small argv parser: `--name value`, `--name=value`, boolean `--flag`, repeated options, and
// positionals. Unknown options are errors that list what is accepted.

export interface OptionSpec {
  type: 'string' | 'number' | 'boolean';
  multiple?: boolean;
  description: string;
}

export type Parsed = {
  positionals: string[];
  values: Record<string, string | number | boolean | (string | number)[]>;
};

export class UsageError extends Error {}

export function parseArgs(argv: readonly string[], spec: Record<string, OptionSpec>): Parsed {
  const values: Parsed['values'] = {};
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const opt = spec[name];
    if (!opt)
      throw new UsageError(
        `unknown option --${name} (accepted: ${Object.keys(spec)
          .map((k) => `--${k}`)
          .join(', ')})`,
      );
    let raw: string | undefined = eq === -1 ? undefined : arg.slice(eq + 1);
    if (opt.type === 'boolean') {
      values[name] = raw === undefined ? true : raw !== 'false';
      continue;
    }
    if (raw === undefined) {
      raw = argv[++i];
      if (raw !== undefined && raw.startsWith('--')) raw = undefined;
    }
    if (raw === undefined || raw === '') throw new UsageError(`--${name} needs a value`);
    const value = opt.type === 'number' ? toNumber(name, raw) : raw;
    if (opt.multiple) ((values[name] ??= []) as (string | number)[]).push(value);
    else values[name] = value;
  }
  return { positionals, values };
}

function toNumber(name: string, raw: string): number {
  const n = Number(raw.replace(/_/g, ''));
  if (!Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got "${raw}"`);
  return n;
}

export function usage(spec: Record<string, OptionSpec>): string {
  return Object.entries(spec)
    .map(([k, o]) => `  --${k}${o.type === 'boolean' ? '' : ` <${o.type}>`}`.padEnd(28) + o.description)
    .join('\n');
}
