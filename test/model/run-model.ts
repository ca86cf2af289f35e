// Runs random command sequences against the engine and the model side by side (fc.commands /
// fc.asyncModelRun). A failure is shrunk to a minimal sequence and reported with its seed, its path and the
// sequence as a test that replays it (replayCommands below), also written to a file.
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { commandArbs, limitedCommandArbs, type ModelCommand } from './commands.js';
import type { StorageVariant } from '../conformance/variants.js';
import { DECLARED_LIMITS, FIFO_DECLARED_LIMITS, ModelDatabases, Real, type ModelDatabase } from './engine.js';

export interface ModelRunOptions {
  seed: number;
  /** The storage under test (default: the ring engine). */
  variant?: StorageVariant;
  numRuns: number;
  maxCommands: number;
  /** Start no new run after this long (the first always runs; a run and the shrinking of a failure are never
   * cut short). */
  timeLimitMs?: number;
  /** A failing case to replay (from a report). */
  path?: string;
  /** Which commands: every kind (default), or those about the limited queue (limitedCommandArbs()). */
  commands?: 'all' | 'limited';
  /** The limited queue declares strict FIFO per key (FIFO_DECLARED_LIMITS) rather than DECLARED_LIMITS. */
  fifo?: boolean;
}

export interface ModelRunStats {
  runs: number;
  commands: number;
}

let runCounter = 0;

async function runSequence(
  db: ModelDatabase,
  cmds: Iterable<ModelCommand>,
  opts: { fifo?: boolean },
  stats?: ModelRunStats,
): Promise<void> {
  const declared = opts.fifo ? FIFO_DECLARED_LIMITS : DECLARED_LIMITS;
  const { model, real } = await Real.open(db, `m${process.pid}x${++runCounter}`, declared);
  try {
    await fc.asyncModelRun(() => ({ model, real }), cmds);
    if (stats) {
      stats.runs++;
      stats.commands += [...cmds].length;
    }
  } finally {
    await real.close(model);
  }
}

/** Replays one sequence (as a failure report prints it) against a fresh run of `db`. */
export async function replayCommands(
  db: ModelDatabase,
  cmds: ModelCommand[],
  opts: { fifo?: boolean } = {},
): Promise<void> {
  await runSequence(db, cmds, opts);
}

/** The replayable test printed for a shrunk failure. */
function replayTest(seed: number, path: string | undefined, counterexample: string, fifo: boolean): string {
  const cmds = counterexample.replace(/^\[|\]$/g, '').trim();
  return [
    `// seed ${seed}, path ${path ?? '?'}: paste into test/conformance/model-based.test.ts`,
    `it('replays model failure seed ${seed}', async () => {`,
    `  await replayCommands(db, [${cmds}]${fifo ? ', { fifo: true }' : ''});`,
    `});`,
  ].join('\n');
}

/** Runs random sequences against databases on `serverUrl` (a fresh one every few runs), reporting a failure
 * with its seed, path and shrunk sequence. */
export async function runModel(serverUrl: string, opts: ModelRunOptions): Promise<ModelRunStats> {
  const dbs = new ModelDatabases(serverUrl, opts.variant);
  try {
    return await check(dbs, opts);
  } finally {
    await dbs.close();
  }
}

/**
 * The seed's runs one at a time, in the order one fc.check() of `numRuns` would make them (run i is path "i"),
 * while time is left; the first always runs. fast-check's own interruptAfterTimeLimit cuts an async run off
 * half-way (it races the run against the clock and leaves it working on its database), and counts a limit
 * reached before any run finished as a failure: a busy machine whose first run outlasted the limit failed that
 * way. Here a run, and the shrinking of a failure, always finish.
 */
async function check(dbs: ModelDatabases, opts: ModelRunOptions): Promise<ModelRunStats> {
  const stats: ModelRunStats = { runs: 0, commands: 0 };
  await dbs.warm();
  const property = fc.asyncProperty(
    fc.commands(opts.commands === 'limited' ? limitedCommandArbs({ fifo: opts.fifo }) : commandArbs(), {
      maxCommands: opts.maxCommands,
      size: 'max',
    }),
    async (cmds) => runSequence(await dbs.next(), cmds, opts, stats),
  );
  const deadline = Date.now() + (opts.timeLimitMs ?? Number.POSITIVE_INFINITY);
  const paths = opts.path ? [opts.path] : Array.from({ length: opts.numRuns }, (_, i) => String(i));
  for (const [i, path] of paths.entries()) {
    if (i > 0 && Date.now() >= deadline) break;
    const details = await fc.check(property, { seed: opts.seed, numRuns: 1, path, endOnFailure: false });
    if (details.failed) report(opts, details, i);
  }
  return stats;
}

/** Throws a failure's report (seed, path, shrunk sequence, a test that replays it), also written to a file. */
function report<Ts extends unknown[]>(
  opts: ModelRunOptions,
  details: fc.RunDetails<Ts>,
  runsBefore: number,
): never {
  const counterexample = details.counterexample ? String(details.counterexample[0]) : '?';
  const error =
    details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance);
  const test = replayTest(
    opts.seed,
    details.counterexamplePath ?? undefined,
    counterexample,
    opts.fifo === true,
  );
  const text = [
    `model-based run failed: seed ${opts.seed}, path ${details.counterexamplePath}, after ${runsBefore} runs that passed (shrunk ${details.numShrinks} times)`,
    `error: ${error}`,
    `shrunk sequence: ${counterexample}`,
    test,
  ].join('\n');
  const file = join(tmpdir(), `awa-model-failure-${opts.seed}-${Date.now()}.txt`);
  writeFileSync(file, text + '\n');
  throw new Error(`${text}\n(written to ${file})`);
}
