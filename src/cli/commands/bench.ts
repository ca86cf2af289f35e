import type { OptionSpec } from '../args.js';
import { benchOptions as options } from '../../../bench/options.js';

// `awa bench`: the harness lives in bench/ (scenarios, adapters for pg-boss and graphile-worker, reports).
// It is loaded only when the command runs, so `awa` itself never loads the peers (dev dependencies).

export const benchOptions: Record<string, OptionSpec> = options;

export async function benchCommand(argv: string[]): Promise<void> {
  const { benchCommand: run } = await import('../../../bench/cli.js');
  await run(argv);
}
