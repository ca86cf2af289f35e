// The one module of bench/ that src/ may import (src/cli/commands/bench.ts, for `awa bench`): the option
// list, cheap to load for `awa --help`, and a runner that loads the harness (and with it the peers, dev
// dependencies) only when a benchmark actually runs. bench/ never imports the CLI.

export { BenchUsageError, type BenchOption } from './args.js';
export { benchOptions, benchSummary } from './options.js';

export async function runBench(argv: string[]): Promise<void> {
  const { benchCommand } = await import('./cli.js');
  await benchCommand(argv);
}
