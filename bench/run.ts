// Standalone entry: `npx tsx bench/run.ts <scenario> [options]`, the same as `awa bench`.
import { BenchUsageError } from './args.js';
import { benchCommand } from './cli.js';

benchCommand(process.argv.slice(2)).then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err instanceof BenchUsageError ? `awa bench: ${err.message}` : err);
    process.exit(err instanceof BenchUsageError ? 2 : 1);
  },
);
