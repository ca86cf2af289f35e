import { describe, expect, it } from 'vitest';
import { parseArgs, UsageError, usage, type OptionSpec } from '../../src/cli/args.js';

const spec: Record<string, OptionSpec> = {
  jobs: { type: 'number', description: 'how many jobs' },
  queue: { type: 'string', multiple: true, description: 'queue to serve' },
  json: { type: 'boolean', description: 'print JSON' },
  name: { type: 'string', description: 'a name' },
};

const usageError = (argv: string[]): UsageError => {
  try {
    parseArgs(argv, spec);
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return err as UsageError;
  }
  throw new Error('expected a UsageError');
};

describe('parseArgs', () => {
  it('reads --a=b and --a b', () => {
    expect(parseArgs(['--name=x'], spec).values).toEqual({ name: 'x' });
    expect(parseArgs(['--name', 'x'], spec).values).toEqual({ name: 'x' });
    expect(parseArgs(['--name=a=b'], spec).values).toEqual({ name: 'a=b' });
  });

  it('reads booleans: bare flag is true, =false is false, and a flag does not take the next word', () => {
    expect(parseArgs(['--json'], spec)).toEqual({ positionals: [], values: { json: true } });
    expect(parseArgs(['--json=false'], spec).values).toEqual({ json: false });
    expect(parseArgs(['--json=true'], spec).values).toEqual({ json: true });
    expect(parseArgs(['--json', 'work'], spec)).toEqual({ positionals: ['work'], values: { json: true } });
  });

  it('reads numbers, with underscores as separators', () => {
    expect(parseArgs(['--jobs', '100_000'], spec).values).toEqual({ jobs: 100_000 });
    expect(parseArgs(['--jobs=1_000_000'], spec).values).toEqual({ jobs: 1_000_000 });
    expect(parseArgs(['--jobs', '2.5'], spec).values).toEqual({ jobs: 2.5 });
  });

  it('rejects a value that is not a number', () => {
    const e = usageError(['--jobs', 'many']);
    expect(e.message).toBe('--jobs must be a number, got "many"');
    usageError(['--jobs=Infinity']);
  });

  it('collects a repeated multiple option in order; a single option keeps the last value', () => {
    expect(parseArgs(['--queue', 'a', '--queue=b', '--queue', 'c'], spec).values).toEqual({
      queue: ['a', 'b', 'c'],
    });
    expect(parseArgs(['--name', 'first', '--name', 'second'], spec).values).toEqual({ name: 'second' });
  });

  it('keeps positionals in order around options', () => {
    expect(parseArgs(['work', '--jobs', '5', 'handlers.js', '--json'], spec)).toEqual({
      positionals: ['work', 'handlers.js'],
      values: { jobs: 5, json: true },
    });
  });

  it('rejects an unknown option with a UsageError listing the accepted ones', () => {
    const e = usageError(['--jbos', '5']);
    expect(e.message).toBe('unknown option --jbos (accepted: --jobs, --queue, --json, --name)');
    expect(usageError(['--nope=1']).message).toContain('unknown option --nope');
  });

  it('rejects an option that needs a value at the end of argv', () => {
    expect(usageError(['--name']).message).toBe('--name needs a value');
    expect(usageError(['--jobs']).message).toBe('--jobs needs a value');
  });
});

describe('usage', () => {
  it('lists every option with its value type', () => {
    const text = usage(spec);
    expect(text).toContain('--jobs <number>');
    expect(text).toContain('--queue <string>');
    expect(text).toMatch(/--json\s+print JSON/);
  });
});
