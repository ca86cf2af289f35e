import type { Environment } from './environment.js';

// One row of a bench report: a system's figures for one scenario (the median run, with every run's rate).

export interface ResultRow {
  scenario: string;
  system: string;
  jobs: number | null;
  concurrency: number | null;
  seconds: number;
  jobsPerSec: number | null;
  p50Ms: number | null;
  p95Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
  deadTuples: number | null;
  liveTuples: number | null;
  peakRssMb: number | null;
  runs: number;
  /** jobsPerSec of every run, the row being the median one. */
  runJobsPerSec: (number | null)[];
  settings: Record<string, unknown>;
  /** Scenario-specific figures (first/last interval, series over time, maintenance counters…). */
  extra: Record<string, unknown>;
  environment?: Environment;
}
