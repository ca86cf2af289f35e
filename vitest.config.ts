import { defineConfig } from 'vitest/config';

// Two cores: two test files at a time. Integration tests share one PostgreSQL server (resolved once by
// the global setup) and each file works in databases of its own.
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts', 'test/integration/**/*.test.ts', 'test/chaos/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
