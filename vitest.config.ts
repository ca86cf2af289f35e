import { defineConfig } from 'vitest/config';

// Integration tests run against one real PostgreSQL per run, found by test/helpers/global-setup.ts;
// each file works in databases of its own. Two cores here, so two test files at a time.
// The chaos suite does real damage (kills workers, restarts PostgreSQL) and takes a couple of minutes;
// it is part of every run (skip it locally with AWA_TEST_CHAOS=0).
const chaos = process.env.AWA_TEST_CHAOS === '0' ? [] : ['test/chaos/**/*.test.ts'];

export default defineConfig({
  test: {
    // test/e2e drives the dashboard in a real Chromium (skipped, saying why, when none is installed).
    include: [
      'test/unit/**/*.test.ts',
      'test/integration/**/*.test.ts',
      'test/e2e/**/*.test.ts',
      'test/model/**/*.test.ts',
      'test/conformance/**/*.test.ts',
      ...chaos,
    ],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    fileParallelism: true,
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 60_000,
  },
});
