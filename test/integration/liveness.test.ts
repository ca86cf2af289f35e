import net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WorkerHost, defineJob, type WorkerOptions } from '../../src/index.js';
import { rescueAbandoned } from '../../src/storage/operations.js';
import { until } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// A host's liveness in the database (issue 8, items 6 and 8): a claim whose answer was lost with its
// connection is handed back instead of staying open forever under a live instance, and a heartbeat whose
// runtime_instances row is gone registers the instance again.

const FAST: Partial<WorkerOptions> = {
  pollIntervalMs: 50,
  promoteIntervalMs: 50,
  leaderElectionIntervalMs: 50,
  shutdownTimeoutMs: 2_000,
};

/**
 * A TCP proxy in front of PostgreSQL that loses the answer to a claim: once armed, a connection that sends a
 * claim (the host's prepared statement "awa-claim-...") still delivers it to the server, but nothing the
 * server sends back on that connection reaches the host any more. cutLost() then cuts those connections,
 * as a network failure would.
 */
class ClaimAnswerLoser {
  private readonly server: net.Server;
  private readonly lost = new Set<net.Socket>();
  armed = false;

  private constructor(
    private readonly target: { host: string; port: number },
    readonly port: number,
    server: net.Server,
  ) {
    this.server = server;
  }

  static async start(target: { host: string; port: number }): Promise<ClaimAnswerLoser> {
    const self: { proxy?: ClaimAnswerLoser } = {};
    const server = net.createServer((client) => self.proxy!.carry(client));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    self.proxy = new ClaimAnswerLoser(target, (server.address() as net.AddressInfo).port, server);
    return self.proxy;
  }

  get lostConnections(): number {
    return this.lost.size;
  }

  private carry(client: net.Socket): void {
    const upstream = net.connect(this.target.port, this.target.host);
    for (const s of [client, upstream]) {
      s.on('error', () => {});
      s.on('close', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (d: Buffer) => {
      if (this.armed && d.includes('awa-claim-')) {
        this.armed = false;
        this.lost.add(client);
      }
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      if (!this.lost.has(client)) client.write(d);
    });
  }

  cutLost(): void {
    for (const s of this.lost) s.destroy();
    this.lost.clear();
  }

  async close(): Promise<void> {
    this.cutLost();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

describe('liveness', () => {
  let f: StorageFixture;
  const hosts: WorkerHost[] = [];
  beforeAll(async () => {
    f = await storageFixture('liveness');
  });
  afterEach(async () => {
    await Promise.all(hosts.splice(0).map((h) => h.stop()));
  });
  afterAll(async () => {
    await f.close();
  });

  function host(queue: string, options: Partial<WorkerOptions>): { h: WorkerHost; errors: string[] } {
    const h = new WorkerHost({ connectionString: f.url, queues: { [queue]: 2 }, ...FAST, ...options });
    const errors: string[] = [];
    h.on('error', (e) =>
      errors.push(e instanceof Error ? `${(e as { code?: string }).code}: ${e.message}` : String(e)),
    );
    hosts.push(h);
    return { h, errors };
  }

  it('a claim that commits but whose answer is lost with its connection is handed back and runs, its attempt not spent', async () => {
    const url = new URL(f.url);
    const proxy = await ClaimAnswerLoser.start({ host: url.hostname, port: Number(url.port || 5432) });
    try {
      const proxied = new URL(f.url);
      proxied.hostname = '127.0.0.1';
      proxied.port = String(proxy.port);
      const kind = defineJob<{ n: number }>({ kind: 'lost_claim', queue: 'lost_claim' });
      const ran: { id: string; attempt: number; runLease: number }[] = [];
      const { id } = await f.client.enqueue(kind, { n: 1 });
      const { h, errors } = host('lost_claim', {
        connectionString: proxied.toString(),
        instanceId: 'lost-claim-host',
        // Neither the slow sweep nor a rescue may be what recovers it here: the instance stays live.
        heartbeatIntervalMs: 5_000,
        heartbeatStalenessMs: 60_000,
      });
      h.register(kind, (job) => void ran.push({ id: job.id, attempt: job.attempt, runLease: job.runLease }));
      // The host's first claim reaches the server, which commits it; its answer never comes back.
      proxy.armed = true;
      await h.start();
      const receipt = await until('the claim to commit', async () => {
        const { rows } = await f.pool.query<{ batch_id: string }>(
          `select b.batch_id::text from awa.claim_batches b join awa.lanes l using (lane_id)
            where l.queue = 'lost_claim' and b.instance_id = 'lost-claim-host'`,
        );
        return rows[0]?.batch_id;
      });
      expect(await f.client.getJob(id)).toMatchObject({ state: 'running', attempt: 1, runLease: 1 });
      // Then its connection dies.
      expect(proxy.lostConnections).toBe(1);
      proxy.cutLost();

      await until('the job to complete', async () => (await f.client.getJob(id))?.state === 'completed');
      // The handler ran once, on the second claim; the lost claim's attempt was not counted.
      expect(ran).toEqual([{ id, attempt: 1, runLease: 2 }]);
      const job = await f.client.getJob(id);
      expect(job).toMatchObject({ state: 'completed', attempt: 1 });
      expect(job?.meta?.errors).toMatchObject([
        { name: 'ClaimLost', error: 'claim answer lost: handed back' },
      ]);
      // In the database: the lost receipt was closed (handed back), a second one completed.
      const { rows } = await f.pool.query<{ batch_id: string; outcome: string }>(
        `select b.batch_id::text, c.outcome from awa.claim_batches b join awa.lanes l using (lane_id)
           join awa.closure_batches c on c.slot = b.slot and c.batch_id = b.batch_id
          where l.queue = 'lost_claim' order by b.batch_id`,
      );
      expect(rows).toEqual([
        { batch_id: receipt, outcome: 'settled' },
        { batch_id: expect.not.stringMatching(`^${receipt}$`) as unknown as string, outcome: 'completed' },
      ]);
      expect(
        errors.some((e) => e.startsWith('AWA_CLAIM_LOST: Handed back 1 job(s) of queue "lost_claim"')),
      ).toBe(true);
    } finally {
      await Promise.all(hosts.splice(0).map((x) => x.stop()));
      await proxy.close();
    }
  });

  it('a heartbeat whose runtime_instances row was deleted registers the instance again, so its claims are not taken for orphans', async () => {
    const kind = defineJob<{ n: number }>({ kind: 'reregister', queue: 'reregister' });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const { h, errors } = host('reregister', {
      instanceId: 'suspended-host',
      heartbeatIntervalMs: 100,
      heartbeatStalenessMs: 2_000,
      maintenance: false,
    });
    h.register(kind, async () => released);
    await h.start();
    const row = async () =>
      (
        await f.pool.query<{ heartbeat_at: Date }>(
          `select heartbeat_at from awa.runtime_instances where instance_id = 'suspended-host'`,
        )
      ).rows[0];
    expect(await row()).toBeDefined();
    // What the cleanup does to the row of a process suspended for more than a day.
    expect(
      (await f.pool.query(`delete from awa.runtime_instances where instance_id = 'suspended-host'`)).rowCount,
    ).toBe(1);
    await until('the row to come back', async () => (await row()) !== undefined, 5_000);
    // The host says so (once: the row stays).
    await until('the host to report it', async () =>
      errors.some((e) => e.startsWith('AWA_INSTANCE_REREGISTERED')),
    );
    await new Promise((r) => setTimeout(r, 300));
    expect(errors.filter((e) => e.startsWith('AWA_INSTANCE_REREGISTERED'))).toHaveLength(1);

    // A claim made afterwards belongs to a known, live instance: a rescue leaves it alone.
    const { id } = await f.client.enqueue(kind, { n: 1 });
    await until('the job to run', async () => (await f.client.getJob(id))?.state === 'running');
    expect(await rescueAbandoned(f.pool, f.schema, { stalenessSeconds: 2, maxBatches: 100 })).toEqual([]);
    // And it stays fresh: still nothing to rescue after the staleness window.
    await new Promise((r) => setTimeout(r, 2_500));
    expect(await rescueAbandoned(f.pool, f.schema, { stalenessSeconds: 2, maxBatches: 100 })).toEqual([]);
    release();
    await until('the job to complete', async () => (await f.client.getJob(id))?.state === 'completed');
    expect(await f.client.getJob(id)).toMatchObject({ state: 'completed', attempt: 1 });
  });
});
