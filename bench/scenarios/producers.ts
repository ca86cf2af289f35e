import type pg from 'pg';
import { benchClient } from '../database.js';
import { LatencyHistogram } from '../latency-histogram.js';
import { sleep } from '../pace.js';
import { makeArgs, round, type Scenario } from '../scenario.js';

// Producers: applications enqueue inside their own transactions. N producers, each on a connection of
// its own, loop for --duration seconds: BEGIN → enqueue one job on that transaction → keep it open
// --hold-ms (a timer, not busy work: the application doing "a little more") → COMMIT. It measures
// committed transactions per second and the latency of each from BEGIN to COMMIT acknowledged. Each system's
// producers first run the same loop for WARMUP_MS uncounted (connections, plan caches and the JIT settle, so
// the system that happens to run first is not the one measured cold). No workers run; at the end the jobs in
// the database must equal the commits (warm-up included), or the row says so loudly.

const MAX_ERROR_SAMPLES = 3;
const WARMUP_MS = 1_000;

export const producersScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile', 'baseline'],
  async run({ adapter, appUrl, opts, progress }) {
    const clients: pg.Client[] = [];
    try {
      for (let p = 0; p < opts.producers; p++) {
        // A lost connection fails its query, counted below.
        const client = benchClient(appUrl, 'bench-producer');
        await client.connect();
        clients.push(client);
      }
      const hist = new LatencyHistogram();
      const make = makeArgs(opts.payloadBytes);
      const errorSamples: string[] = [];
      let committed = 0;
      let warmupCommits = 0;
      let errors = 0;
      let i = 0;

      const bar = progress(`producers ${adapter.label}`, opts.duration);
      const warmupEnd = performance.now() + WARMUP_MS;
      const start = warmupEnd;
      const end = warmupEnd + opts.duration * 1000;
      const produce = async (client: pg.Client) => {
        while (performance.now() < end) {
          const t0 = performance.now();
          // Transactions begun in the warm-up count for the ledger only.
          const counted = t0 >= warmupEnd;
          try {
            await client.query('begin');
            await adapter.enqueueInTransaction(client, make(i++));
            if (opts.holdMs > 0) await sleep(opts.holdMs);
            await client.query('commit');
            if (counted) {
              hist.recordMs(performance.now() - t0);
              committed++;
            } else {
              warmupCommits++;
            }
          } catch (err) {
            errors++;
            if (errorSamples.length < MAX_ERROR_SAMPLES)
              errorSamples.push(err instanceof Error ? err.message : String(err));
            await client.query('rollback').catch(() => {});
          }
        }
      };
      const ticker = setInterval(
        () => bar.update(Math.max(0, Math.floor((performance.now() - start) / 1000))),
        250,
      );
      await Promise.all(clients.map(produce));
      clearInterval(ticker);
      // Transactions begun before the deadline are let finish; the rate is over the whole time.
      const seconds = (performance.now() - start) / 1000;
      bar.finish(opts.duration);

      const inDatabase = await adapter.pending();
      const ledger = committed + warmupCommits;
      if (inDatabase !== ledger) {
        process.stderr.write(
          `\n!!! producers ${adapter.label}: MISMATCH: ${ledger} transactions committed, ` +
            `${inDatabase} jobs in the database (${inDatabase - ledger > 0 ? '+' : ''}${inDatabase - ledger})\n`,
        );
      }
      return {
        jobs: committed,
        concurrency: opts.producers, // the conc column: producer transactions at once
        seconds: round(seconds, 3),
        jobsPerSec: round(committed / seconds, 1),
        ...hist.summaryMs(),
        extra: {
          producers: opts.producers,
          holdMs: opts.holdMs,
          errors,
          warmupCommits,
          jobsInDatabase: inDatabase,
          mismatch: inDatabase - ledger,
          ...(errorSamples.length ? { errorSamples } : {}),
        },
      };
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => {})));
    }
  },
};
