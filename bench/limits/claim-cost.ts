// What a claim costs the database per job, limited against unlimited, on one connection with nothing else
// running: the limits bench's drains share two cores among four hosts and the server, and their ratio moves by
// ±0.15 from pair to pair; this is the steady figure behind it. Each queue gets the same backlog over 1,000 keys;
// claims of 236 jobs follow one another, and after each the claim from four claims back is completed (as
// settleAttempts() does it for a host), so about 900 attempts hold slots while a limited claim counts them, as in
// the fleet's drains. The first claims (the plans' first runs) are not counted. It runs in a schema of its own,
// dropped after, so the fleet's runs find nothing of it (its rows would weigh on their readers).
import pg from 'pg';
import { AwaClient, defineJob } from '../../src/index.js';
import {
  claimJobs,
  resolveSchema,
  settleAttempts,
  type ClaimBatch,
  type Schema,
} from '../../src/storage/operations.js';
import { median, round } from '../scenario.js';
import { seededRandom } from './seeded.js';

const CLAIM = 236;
const OPEN_CLAIMS = 4;
const WARM_CLAIMS = 5;
const KEYS = 1_000;

export interface ClaimCost {
  /** A claim call's time, round trip and decoding its jobs included, over the jobs it started, µs. */
  unlimitedUsPerJob: number;
  limitedUsPerJob: number;
  /** Jobs a limited claim started, per claim (the others its claim sent to the gate), median. */
  limitedJobsPerClaim: number;
}

interface Pass {
  usPerJob: number;
  jobsPerClaim: number;
}

async function pass(db: pg.Client, schema: Schema, queue: string, claims: number): Promise<Pass> {
  const open: ClaimBatch[][] = [];
  let micros = 0;
  let jobs = 0;
  const perClaim: number[] = [];
  for (let i = 0; i < claims + WARM_CLAIMS; i++) {
    const started = process.hrtime.bigint();
    const { batches } = await claimJobs(db, schema, {
      queue,
      max: CLAIM,
      instanceId: 'claim-cost',
      agingSeconds: 60,
      deadlineSeconds: 600,
    });
    const took = Number(process.hrtime.bigint() - started) / 1_000;
    const got = batches.reduce((n, b) => n + b.jobs.length, 0);
    if (i >= WARM_CLAIMS) {
      micros += took;
      jobs += got;
      perClaim.push(got);
    }
    open.push(batches);
    if (open.length > OPEN_CLAIMS) await complete(db, schema, open.shift()!);
  }
  for (const batches of open) await complete(db, schema, batches);
  return { usPerJob: jobs === 0 ? 0 : micros / jobs, jobsPerClaim: median(perClaim) };
}

async function complete(db: pg.Client, schema: Schema, batches: readonly ClaimBatch[]): Promise<void> {
  const items = batches.flatMap((b) =>
    b.jobs.map((j) => ({
      claimSlot: b.claimSlot,
      batchId: b.batchId,
      idx: j.idx,
      jobId: j.id,
      runLease: j.runLease,
      outcome: 'completed' as const,
    })),
  );
  await settleAttempts(db, schema, items);
}

/** A seeded key for each job (the same every run). */
function keysFor(n: number): string[] {
  const next = seededRandom();
  return Array.from({ length: n }, () => `k${Math.floor(next() * KEYS)}`);
}

/**
 * Measures in a schema of its own on the database at `url` (created, migrated, and dropped after), in `rounds`
 * passes of each queue in turn, `claims` counted claims a pass; returns the medians over passes.
 */
export async function measureClaimCost(url: string, { rounds = 3, claims = 40 } = {}): Promise<ClaimCost> {
  const schema = 'awa_claim_cost';
  const resolved = resolveSchema(schema);
  const client = new AwaClient({ connectionString: url, schema, poolSize: 2 });
  const db = new pg.Client({ connectionString: url, application_name: 'awa-bench-claim-cost' });
  await db.connect();
  try {
    await client.migrate();
    const total = rounds * (claims + WARM_CLAIMS) * CLAIM;
    const free = defineJob<{ tenant: string }>({ kind: 'claim_cost_free', queue: 'claim_cost_free' });
    const keys = defineJob<{ tenant: string }>({ kind: 'claim_cost_keys', queue: 'claim_cost_keys' });
    const tenants = keysFor(total);
    for (const kind of [free, keys])
      for (let i = 0; i < total; i += 2_000)
        await client.enqueueMany(tenants.slice(i, i + 2_000).map((tenant) => ({ kind, args: { tenant } })));
    await client.setQueueLimits('claim_cost_keys', { key: { arg: 'tenant' }, perKey: { concurrency: 3 } });
    const unlimited: Pass[] = [];
    const limited: Pass[] = [];
    for (let r = 0; r < rounds; r++) {
      unlimited.push(await pass(db, resolved, 'claim_cost_free', claims));
      limited.push(await pass(db, resolved, 'claim_cost_keys', claims));
    }
    return {
      unlimitedUsPerJob: round(median(unlimited.map((p) => p.usPerJob)), 1),
      limitedUsPerJob: round(median(limited.map((p) => p.usPerJob)), 1),
      limitedJobsPerClaim: median(limited.map((p) => p.jobsPerClaim)),
    };
  } finally {
    await client.close();
    await db.query(`drop schema if exists ${schema} cascade`).catch(() => {});
    await db.end();
  }
}
