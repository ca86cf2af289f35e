import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, migrate } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { MIGRATION_NAMES } from '../helpers/migrations.js';
import { until } from '../helpers/wait.js';

/** Polls a condition on files and processes (no database): until() takes an async check. */
const waitUntil = (what: string, cond: () => boolean, timeoutMs: number) =>
  until(what, async () => cond(), timeoutMs, 25);

// A rolling deploy loses nothing: hosts and a producer of the release before the newest migration (that commit,
// checked out into a git worktree) run while this release migrates the schema under them and starts beside
// them; then the old ones stop. A ledger written by every run of a handler proves each job ran exactly once,
// and `migrationPlan()` said beforehand that the running hosts would keep working.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = 'src/cli/main.ts';
const FIXTURES = ['test/fixtures/rolling-handlers.ts', 'test/fixtures/rolling-producer.ts'];

const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();

/** The commit before the one that added the newest migration: the release the newest migration upgrades. */
function previousRelease(): string {
  const newest = MIGRATION_NAMES.length;
  const file = `sql/migrations/${String(newest).padStart(3, '0')}_${MIGRATION_NAMES[newest - 1]}.sql`;
  const added = git('log', '--diff-filter=A', '--format=%H', '-1', '--', file);
  if (!added) throw new Error(`${file} is not committed: the test needs the commit that added it`);
  return git('rev-parse', `${added}^`);
}

/** The schema version a checkout's build migrates to: its newest migration. */
const versionOf = (dir: string) =>
  Math.max(...readdirSync(join(dir, 'sql/migrations')).map((f) => Number(f.slice(0, 3)) || 0));

class Proc {
  private output = '';
  readonly exited: Promise<number | null>;
  constructor(
    readonly label: string,
    readonly proc: ChildProcess,
  ) {
    const keep = (d: Buffer) => (this.output = (this.output + d.toString()).slice(-8_000));
    proc.stdout?.on('data', keep);
    proc.stderr?.on('data', keep);
    this.exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  }
  get log(): string {
    return this.output;
  }
  async stop(): Promise<number | null> {
    this.proc.kill('SIGTERM');
    return this.exited;
  }
}

describe('a rolling deploy across the newest migration', () => {
  let db: TestDatabase;
  let old: { dir: string; commit: string; version: number };
  let files: string;
  const procs: Proc[] = [];

  /** Runs `args` with tsx in the tree at `cwd` (this checkout or the old one), the run's env added. */
  const start = (label: string, cwd: string, args: string[], release: string): Proc => {
    const env = {
      ...process.env,
      DATABASE_URL: db.url,
      AWA_ROLLING_LEDGER: join(files, 'ledger.jsonl'),
      AWA_ROLLING_PRODUCED: join(files, `produced-${label}.txt`),
      AWA_ROLLING_RELEASE: release,
    };
    const p = new Proc(label, spawn(process.execPath, ['--import', 'tsx', ...args], { cwd, env }));
    procs.push(p);
    return p;
  };
  const host = (label: string, cwd: string, release: string) =>
    start(label, cwd, [CLI, 'work', '--handlers', FIXTURES[0]!, '--queue', 'rolling=4'], release);
  const producer = async (label: string, cwd: string, release: string) => {
    const p = start(label, cwd, [FIXTURES[1]!], release);
    await waitUntil(`${label} to enqueue`, () => p.log.includes('ready') || p.proc.exitCode !== null, 30_000);
    expect(p.log).toContain('ready');
    return p;
  };
  const ledger = () =>
    existsSync(join(files, 'ledger.jsonl'))
      ? readFileSync(join(files, 'ledger.jsonl'), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { id: string; attempt: number; release: string })
      : [];
  const produced = (label: string) =>
    existsSync(join(files, `produced-${label}.txt`))
      ? readFileSync(join(files, `produced-${label}.txt`), 'utf8')
          .split('\n')
          .filter(Boolean)
      : [];
  const ranBy = (release: string) => ledger().filter((l) => l.release === release).length;

  beforeAll(async () => {
    const commit = previousRelease();
    const dir = mkdtempSync(join(tmpdir(), 'awa-previous-release-'));
    rmSync(dir, { recursive: true });
    git('worktree', 'add', '--detach', dir, commit);
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    // The same handlers and producer in the old tree, importing that release's code.
    for (const f of FIXTURES) copyFileSync(join(ROOT, f), join(dir, f));
    old = { dir, commit, version: versionOf(dir) };
    files = mkdtempSync(join(tmpdir(), 'awa-rolling-'));
    writeFileSync(join(files, 'ledger.jsonl'), '');
    db = await createTestDatabase('rolling');
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGKILL');
    await Promise.all(procs.map((p) => p.exited));
    await db?.drop();
    if (old) git('worktree', 'remove', '--force', old.dir);
    git('worktree', 'prune');
    if (files) rmSync(files, { recursive: true, force: true });
  });

  it('hosts of the previous release keep claiming and settling; every job runs once', async () => {
    // The previous release migrates and runs: one host, one producer.
    const migrated = start('old-migrate', old.dir, [CLI, 'migrate'], 'old');
    expect(await migrated.exited, migrated.log).toBe(0);
    const oldHost = host('old-host', old.dir, 'old');
    const oldProducer = await producer('old-producer', old.dir, 'old');
    await waitUntil('the old host to run jobs', () => ranBy('old') >= 50, 30_000);

    // This release checks, then migrates under them.
    const client = new AwaClient({ connectionString: db.url });
    try {
      const plan = await client.migrationPlan({ liveMs: 30_000 });
      expect(plan.from).toBe(old.version);
      // Every migration since that release says it is safe under its hosts.
      const since = MIGRATION_NAMES.map((_, i) => i + 1).filter((v) => v > old.version);
      expect(since.length).toBeGreaterThan(0);
      expect(plan.pending.map((m) => [m.version, m.rolling.safe])).toEqual(since.map((v) => [v, true]));
      expect(plan.hosts).toHaveLength(1);
      expect(plan.hosts[0]).toMatchObject({ builtFor: old.version, compatible: true });
      expect(plan.compatible).toBe(true);
      await migrate({ connectionString: db.url });

      // The old host and producer keep going on the new schema and functions; this release starts beside them.
      const oldRanBefore = ranBy('old');
      await waitUntil(
        'the old host to run jobs after the migration',
        () => ranBy('old') >= oldRanBefore + 50,
        30_000,
      );
      const newHost = host('new-host', ROOT, 'new');
      const newProducer = await producer('new-producer', ROOT, 'new');
      await waitUntil('the new host to run jobs', () => ranBy('new') >= 50, 30_000);

      // The old release leaves (producer first, then its host finishes what it runs and hands back what it held).
      expect(await oldProducer.stop(), oldProducer.log).toBe(0);
      expect(await oldHost.stop(), oldHost.log).toBe(0);
      expect(await newProducer.stop(), newProducer.log).toBe(0);
      const all = [...produced('old-producer'), ...produced('new-producer')];
      expect(produced('old-producer').length).toBeGreaterThan(0);
      expect(produced('new-producer').length).toBeGreaterThan(0);
      await waitUntil(
        'every job to run',
        () => new Set(ledger().map((l) => l.id)).size >= all.length,
        60_000,
      );
      expect(await newHost.stop(), newHost.log).toBe(0);

      // Every job enqueued ran exactly once, on its first attempt; nothing failed or is left.
      const runs = ledger();
      expect(runs.length).toBe(all.length);
      expect(new Set(runs.map((l) => l.id))).toEqual(new Set(all));
      expect(runs.every((l) => l.attempt === 1)).toBe(true);
      const [counts] = (await client.counts()).filter((c) => c.queue === 'rolling');
      expect(counts).toMatchObject({
        available: 0,
        running: 0,
        retryable: 0,
        failed: 0,
        dlq: 0,
        completed: all.length,
      });
    } finally {
      await client.close();
    }
  }, 180_000);
});
