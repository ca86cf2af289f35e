import { UsageError, type OptionSpec } from '../args.js';
import { BenchUsageError, benchOptions as options, benchSummary, runBench } from '../../../bench/index.js';

// `awa bench`: the harness lives in bench/ and is reached through bench/index.ts only (the single src →
// bench import; bench/ imports nothing from the CLI). The harness itself is loaded when the command
// runs, so `awa` never loads the peers (dev dependencies) otherwise.

export const benchOptions: Record<string, OptionSpec> = options;
export { benchSummary };

export async function benchCommand(argv: string[]): Promise<void> {
  try {
    await runBench(argv);
  } catch (err) {
    throw err instanceof BenchUsageError ? new UsageError(err.message) : err;
  }
}
