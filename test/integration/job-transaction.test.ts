import type { ClientBase } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AwaClient } from '../../src/index.js';
import { AwaError, WorkerHost, type WorkerOptions } from '../../src/index.js';
import { ChaosWorker } from '../chaos/harness.js';
import { LEDGER_DDL, TX_QUEUE, txJob } from '../fixtures/tx-jobs.js';
import type { TestDatabase } from '../helpers/database.js';
import { closeDatabase, migratedDatabase, QUICK_HOST, stopHosts } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';

// ctx.transaction() (docs/flows.md, "Settling in the handler's transaction"): the handler's own writes and its
// job's completion commit together or not at all. A worker process is SIGKILLed inside the transaction (neither
// the ledger row nor the completion exists; the rescued job writes once and completes) and just after it
// committed (both exist, and the job never runs again); a stale attempt's transaction writes nothing; a
// transaction that throws leaves nothing and the attempt fails as any handler error does.

const FIXTURE = new URL('../fixtures/tx-worker.ts', import.meta.url).pathname;

let db: TestDatabase;
let client: AwaClient;
let logDir: string;
const hosts: WorkerHost[] = [];
const workers: ChaosWorker[] = [];

const RESCUING: Partial<WorkerOptions> = {
  ...QUICK_HOST,
  heartbeatIntervalMs: 200,
  heartbeatStalenessMs: 1_500,
  rescueIntervalMs: 200,
};

async function ledger(jobId: string): Promise<{ run_lease: number; uid: string }[]> {
  const { rows } = await client.pool.query<{ run_lease: number; uid: string }>(
    'select run_lease, uid from tx_ledger where job_id = $1 order by run_lease',
    [jobId],
  );
  return rows;
}

/** A host in this process whose handler writes the ledger row and completes in one transaction. */
async function startHost(extra: Partial<WorkerOptions> = {}): Promise<WorkerHost> {
  const host = new WorkerHost({ connectionString: db.url, queues: { [TX_QUEUE]: 2 }, ...RESCUING, ...extra });
  host.on('error', () => {});
  host.register(txJob, (job, ctx) =>
    ctx.transaction(async (tx) => {
      await tx.query('insert into tx_ledger (job_id, run_lease, uid) values ($1, $2, $3)', [
        job.id,
        job.runLease,
        job.args.uid,
      ]);
      return { wrote: job.args.uid };
    }),
  );
  hosts.push(host);
  await host.start();
  return host;
}

async function spawnWorker(id: string): Promise<ChaosWorker> {
  const w = await ChaosWorker.spawn(logDir, { url: db.url, instanceId: id, maintenance: false }, FIXTURE);
  workers.push(w);
  return w;
}

beforeAll(async () => {
  ({ db, client } = await migratedDatabase('job_tx', { poolSize: 4 }));
  await client.pool.query(LEDGER_DDL);
  logDir = mkdtempSync(join(tmpdir(), 'awa-tx-'));
});
afterEach(async () => {
  await stopHosts(hosts);
  await Promise.all(workers.splice(0).map((w) => w.kill()));
});
afterAll(async () => {
  await closeDatabase(client, db);
  rmSync(logDir, { recursive: true, force: true });
});

describe('ctx.transaction()', () => {
  it('a worker killed inside the transaction leaves neither its writes nor the completion; the rescue runs it once more', async () => {
    const worker = await spawnWorker('tx-inside');
    const { id } = await client.enqueue(txJob, { uid: 'inside', hang: 'inside' });
    await until('the row written, uncommitted', async () =>
      worker.lines().some((l) => (l as { event: string }).event === 'inside'),
    );
    await worker.kill();
    expect(await ledger(id)).toEqual([]);
    expect((await client.getJob(id))!.state).toBe('running');
    await startHost();
    await until(
      'the rescued job completed',
      async () => (await client.getJob(id))?.state === 'completed',
      30_000,
    );
    expect(await ledger(id)).toEqual([{ run_lease: 2, uid: 'inside' }]);
    expect(await client.getJob(id)).toMatchObject({ attempt: 2, result: { wrote: 'inside' } });
  });

  it('a worker killed just after the commit leaves both, and the job never runs again', async () => {
    const worker = await spawnWorker('tx-after');
    const { id } = await client.enqueue(txJob, { uid: 'after', hang: 'after' });
    await until('the transaction committed', async () =>
      worker.lines().some((l) => (l as { event: string }).event === 'committed'),
    );
    await worker.kill();
    expect(await ledger(id)).toEqual([{ run_lease: 1, uid: 'after' }]);
    expect(await client.getJob(id)).toMatchObject({
      state: 'completed',
      attempt: 1,
      result: { wrote: 'after' },
    });
    // A leader that would rescue the dead worker's open attempts finds none of this job's.
    await startHost();
    const probe = await client.enqueue(txJob, { uid: 'probe' });
    await until('the probe ran', async () => (await client.getJob(probe.id))?.state === 'completed');
    await new Promise((r) => setTimeout(r, 2 * (RESCUING.heartbeatStalenessMs as number)));
    expect(await ledger(id)).toEqual([{ run_lease: 1, uid: 'after' }]);
    expect((await client.getJob(id))!.attempt).toBe(1);
  });

  it("a stale attempt's transaction writes nothing: cancelled while it ran, its commit is refused", async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const seen: unknown[] = [];
    let wrote!: () => void;
    const written = new Promise<void>((r) => (wrote = r));
    const host = new WorkerHost({ connectionString: db.url, queues: { [TX_QUEUE]: 1 }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(txJob, async (job, ctx) => {
      try {
        return await ctx.transaction(async (tx) => {
          await tx.query('insert into tx_ledger (job_id, run_lease, uid) values ($1, $2, $3)', [
            job.id,
            job.runLease,
            job.args.uid,
          ]);
          wrote();
          await gate;
          return 'late';
        });
      } catch (err) {
        seen.push(err);
        throw err;
      }
    });
    hosts.push(host);
    await host.start();
    const { id } = await client.enqueue(txJob, { uid: 'stale' });
    await written;
    expect(await client.cancel(id)).toBe('running');
    open();
    await until('the handler heard', async () => seen.length === 1);
    expect(seen[0]).toBeInstanceOf(AwaError);
    expect(seen[0]).toMatchObject({ code: 'AWA_ATTEMPT_CLOSED' });
    expect(await ledger(id)).toEqual([]);
    expect((await client.getJob(id))!.state).toBe('cancelled');
  });

  it('a transaction that throws writes nothing, and the attempt fails as any handler error (then retries)', async () => {
    let calls = 0;
    const host = new WorkerHost({ connectionString: db.url, queues: { [TX_QUEUE]: 1 }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(txJob, (job, ctx) =>
      ctx.transaction(async (tx) => {
        calls++;
        await tx.query('insert into tx_ledger (job_id, run_lease, uid) values ($1, $2, $3)', [
          job.id,
          job.runLease,
          job.args.uid,
        ]);
        if (calls === 1) throw new Error('the application refused');
        return calls;
      }),
    );
    hosts.push(host);
    await host.start();
    const { id } = await client.enqueue(txJob, { uid: 'throws' });
    await until('retryable after the failure', async () => (await client.getJob(id))?.state === 'retryable');
    expect(await ledger(id)).toEqual([]);
    expect((await client.getJob(id))!.meta!.errors!.at(-1)!.error).toBe('the application refused');
    await client.retryJob(id);
    await until('completed on the retry', async () => (await client.getJob(id))?.state === 'completed');
    expect(await ledger(id)).toEqual([{ run_lease: 2, uid: 'throws' }]);
    expect((await client.getJob(id))!.result).toBe(2);
  });

  it('one transaction per attempt: a second call is refused, and nothing it would write is written', async () => {
    const seen: unknown[] = [];
    const host = new WorkerHost({ connectionString: db.url, queues: { [TX_QUEUE]: 1 }, ...QUICK_HOST });
    host.on('error', () => {});
    host.register(txJob, async (job, ctx) => {
      const write = (uid: string) => async (tx: ClientBase) => {
        await tx.query('insert into tx_ledger (job_id, run_lease, uid) values ($1, $2, $3)', [
          job.id,
          job.runLease,
          uid,
        ]);
      };
      await ctx.transaction(write('one'));
      await ctx.transaction(write('two')).catch((err: unknown) => seen.push(err));
      return 'ignored: the attempt completed with its transaction';
    });
    hosts.push(host);
    await host.start();
    const { id } = await client.enqueue(txJob, { uid: 'twice' });
    await until('the second call refused', async () => seen.length === 1);
    expect(seen[0]).toMatchObject({ code: 'AWA_ATTEMPT_CLOSED' });
    await until('completed', async () => (await client.getJob(id))?.state === 'completed');
    expect((await ledger(id)).map((r) => r.uid)).toEqual(['one']);
    expect((await client.getJob(id))!.result).toBeNull();
  });
});
