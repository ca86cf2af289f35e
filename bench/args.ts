import { parseArgs } from 'node:util';

// The harness's own argv parsing, on Node's util.parseArgs, so bench/ needs nothing from the CLI (the
// `awa bench` command imports bench/, never the other way round). Numbers are strings on the command
// line; they are converted here (underscores allowed: --jobs 100_000).

export interface BenchOption {
  type: 'string' | 'number' | 'boolean';
  description: string;
}

/** A bad command line: callers print the message and exit 2 (no stack trace). */
export class BenchUsageError extends Error {}

export interface BenchArgv {
  positionals: string[];
  values: Record<string, string | number | boolean | undefined>;
}

export function parseBenchArgs(argv: readonly string[], spec: Record<string, BenchOption>): BenchArgv {
  const options = Object.fromEntries(
    Object.entries(spec).map(([name, o]) => [name, { type: o.type === 'boolean' ? 'boolean' : 'string' }]),
  ) as Record<string, { type: 'string' | 'boolean' }>;
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true }) as typeof parsed;
  } catch (err) {
    const accepted = Object.keys(spec)
      .map((k) => `--${k}`)
      .join(', ');
    const message = err instanceof Error ? err.message : String(err);
    // Node's wording for an unknown option is long; name the option and what is accepted instead.
    const unknown =
      (err as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && /'([^']+)'/.exec(message);
    throw new BenchUsageError(
      unknown ? `unknown option ${unknown[1]} (accepted: ${accepted})` : `${message} (accepted: ${accepted})`,
    );
  }
  const values: BenchArgv['values'] = {};
  for (const [name, raw] of Object.entries(parsed.values)) {
    if (spec[name]?.type !== 'number' || typeof raw !== 'string') {
      values[name] = raw;
      continue;
    }
    const n = Number(raw.replace(/_/g, ''));
    if (raw === '' || !Number.isFinite(n))
      throw new BenchUsageError(`--${name} must be a number, got "${raw}"`);
    values[name] = n;
  }
  return { positionals: parsed.positionals, values };
}
