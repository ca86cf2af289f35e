// The portable adapter's environment contract (see bench/PORTABLE-ADAPTER.md), parsed once.

export interface PortableConfig {
  databaseUrl: string;
  scenario: string;
  producerMode: 'fixed' | 'depth-target';
  targetDepth: number;
  producerRate: number;
  rateControlFile: string | null;
  batchMax: number;
  batchMs: number;
  harnessPacing: boolean;
  workerCount: number;
  payloadBytes: number;
  workMs: number;
  sampleEveryS: number;
  /** BENCH_INSTANCE_ID: which replica this is (0, 1, …); stamped on every line. */
  instanceId: number;
  /** AWA_COMPLETED_RETENTION_MS (awa-specific, not part of the harness contract): keep completed jobs
   * readable this long; replica-check.ts sets it to count completions in the database. */
  completedRetentionMs: number | null;
}

function num(env: NodeJS.ProcessEnv, name: string, dflt: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) throw new Error(`${name} must be a number >= ${min}, got "${raw}"`);
  return n;
}

export function readConfig(env: NodeJS.ProcessEnv = process.env): PortableConfig {
  const databaseUrl = env.DATABASE_URL;
  if (!databaseUrl) throw new Error('DATABASE_URL is required');
  const mode = env.PRODUCER_MODE ?? 'fixed';
  if (mode !== 'fixed' && mode !== 'depth-target') {
    throw new Error(`PRODUCER_MODE must be "fixed" or "depth-target", got "${mode}"`);
  }
  return {
    databaseUrl,
    // Every scenario (long_horizon or unknown) is run the same way: the harness shapes the load.
    scenario: env.SCENARIO ?? 'long_horizon',
    producerMode: mode,
    targetDepth: num(env, 'TARGET_DEPTH', 1000),
    producerRate: num(env, 'PRODUCER_RATE', 0),
    rateControlFile: env.PRODUCER_RATE_CONTROL_FILE || null,
    batchMax: Math.floor(num(env, 'PRODUCER_BATCH_MAX', 128, 1)),
    batchMs: num(env, 'PRODUCER_BATCH_MS', 10, 1),
    harnessPacing: env.PRODUCER_PACING === 'harness',
    workerCount: Math.floor(num(env, 'WORKER_COUNT', 32, 1)),
    payloadBytes: Math.floor(num(env, 'JOB_PAYLOAD_BYTES', 256)),
    workMs: num(env, 'JOB_WORK_MS', 1),
    sampleEveryS: num(env, 'SAMPLE_EVERY_S', 5, 0.1),
    instanceId: Math.floor(num(env, 'BENCH_INSTANCE_ID', 0)),
    completedRetentionMs:
      env.AWA_COMPLETED_RETENTION_MS === undefined || env.AWA_COMPLETED_RETENTION_MS === ''
        ? null
        : Math.floor(num(env, 'AWA_COMPLETED_RETENTION_MS', 0)),
  };
}
