import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// One concept, one name (docs/architecture.md, "Glossary"). Each entry bans the names a concept had before it
// was given one, in the source, the SQL and the docs, and the glossary must define the name that replaced them.
// A hit says where, and which word to use.

const root = new URL('../../', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), 'utf8');

function files(dir: string, ext: RegExp): string[] {
  return readdirSync(new URL(dir, root), { recursive: true, encoding: 'utf8' })
    .filter((path) => ext.test(path))
    .map((path) => `${dir}${path}`);
}

const SQL = files('sql/', /\.sql$/);
const SOURCE = [...files('src/', /\.(ts|js)$/), ...SQL];
const PROSE = [...files('docs/', /\.md$/), 'README.md'];

interface Banned {
  /** The names the concept must no longer go by. */
  pattern: RegExp;
  /** Where they are banned. */
  in: readonly string[];
  /** What to write instead. */
  use: string;
  /** The glossary's word for the concept, when the glossary defines it. */
  term?: string;
}

const BANNED: readonly Banned[] = [
  // Ending an attempt is settling it, from the handler to the SQL that writes it.
  {
    pattern: /\bfinishAttempts\b|\bfinish_attempts\b/,
    in: [...SOURCE, ...PROSE],
    use: 'settleAttempts',
    term: 'settle',
  },
  { pattern: /\.finish\s*\(/, in: SQL, use: 'settle_attempts()', term: 'settle' },
  { pattern: /`finish\(\)`|\bfinish\(\) /, in: PROSE, use: 'settle_attempts()', term: 'settle' },
  // The leader is elected by the elector, which runs the maintenance services.
  {
    pattern: /\bMaintenanceLeader\b|\bLeaderConfig\b|\bLeaderEvents\b/,
    in: [...SOURCE, ...PROSE],
    use: 'Elector',
    term: 'elector',
  },
  // A claimed job waiting in the host for a permit is held, not "waiting" (a state of parked jobs).
  {
    pattern: /\bget waiting\(\)|\.waiting\b(?=,\s*$)/m,
    in: files('src/host/', /\.ts$/),
    use: 'held',
    term: 'held',
  },
  // The runtime is split by role; no file or page may still send a reader to src/runtime.
  {
    pattern: /src\/runtime\b|\bruntime\/index\.ts\b/,
    in: [...SOURCE, ...PROSE],
    use: 'the role folders (src/producer, src/operator, src/host, src/maintenance) or src/roles.ts',
  },
  // What batches and flushes settlements is the settle batcher; "completion" is one outcome, not the act.
  {
    pattern: /\bCompletionBatcher\b|\bcompletion[ -]batcher\b|\bcompletion flush(es)?\b|\bawa\.completion\./i,
    // Not in migrations (history, applied as written) nor in telemetry.md's note of the renamed metrics.
    in: [
      ...SOURCE.filter((p) => !p.startsWith('sql/migrations/')),
      ...PROSE.filter((p) => p !== 'docs/telemetry.md'),
    ],
    use: 'SettleBatcher, settle batcher, settle flush, awa.settle.*',
    term: 'settle',
  },
  // Their old option names are accepted in one place only: the table of renamed options.
  {
    pattern: /\bcompletion(BatchSize|FlushMs)\b/,
    in: SOURCE.filter((p) => p !== 'src/host/config.ts'),
    use: 'settleBatchSize, settleFlushMs',
    term: 'settle',
  },
  // A schedule's cron expression is its `cron` field, as it is declared.
  {
    pattern: /\.expression\b|^\s*expression:\s/,
    in: files('src/', /\.ts$/),
    use: 'cron',
    term: 'cron schedule',
  },
  // The handler's return value will be a job's result (issue 35): the settle path does not use the word.
  {
    pattern: /\bresultBatcher\b|\bResultSink\b|\bResultRejected\b/,
    in: [...SOURCE, ...PROSE],
    use: 'settleBatcher, SettleSink, SettlementRejected',
    term: 'settle',
  },
];

function glossary(): string {
  const doc = read('docs/architecture.md');
  return doc.slice(doc.indexOf('## Glossary'), doc.indexOf('## Layers'));
}

describe('vocabulary', () => {
  it('reads the files it checks', () => {
    expect(SOURCE.length).toBeGreaterThan(150);
    expect(PROSE.length).toBeGreaterThan(10);
  });

  it.each(BANNED.map((b) => [b.pattern.source, b] as const))('bans %s', (_, banned) => {
    const hits: string[] = [];
    for (const path of banned.in) {
      read(path)
        .split('\n')
        .forEach((line, i) => {
          if (banned.pattern.test(line)) hits.push(`${path}:${i + 1}: ${line.trim()} (use "${banned.use}")`);
        });
    }
    expect(hits).toEqual([]);
  });

  it('defines in the glossary every word the banned names gave way to', () => {
    const defined = glossary();
    const terms = new Set(BANNED.flatMap((b) => (b.term ? [b.term] : [])));
    expect(terms.size).toBeGreaterThan(2);
    for (const term of terms) expect(defined).toMatch(new RegExp(`\\*\\*[^*|]*\\b${term}\\b[^*|]*\\*\\*`));
  });
});
