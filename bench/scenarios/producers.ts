import type pg from 'pg';
import { benchClient } from '../database.js';
import { LatencyHistogram } from '../latency-histogram.js';
import { sleep } from '../pace.js';
import { makeArgs, round, type Scenario } from '../scenario.js';

// Producers: applications enqueue inside their own transactions. N producers, each on a connection of
// its own, loop for --duration seconds: BEGIN → enqueue one job on that transaction → keep it open
// --hold-ms (a timer, not busy work: the application doing "a little more") → COMMIT. It measures
// committed transactions per second and the latency of each from BEGIN to COMMIT acknowledged. No workers
// run; at the end the jobs in the database must equal the commits, or the row says so loudly.

const MAX_ERROR_SAMPLES = 3;

export const producersScenario: Scenario = {
  kind: 'system',
  systemsForAll: ['awa', 'pgboss', 'graphile', 'baseline'],
  async run({ adapter, url, opts, progress }) {
    const clients: pg.Client[] = [];
    try {
      for (let p = 0; p < opts.producers; p++) {
        // A lost connection fails its query, counted below.
        const client = benchClient(url, 'bench-producer');
        await client.connect();
        clients.push(client);
      }
      const hist = new LatencyHistogram();
      const make = makeArgs(opts.payloadBytes);
      const errorSamples: string[] = [];
      let committed = 0;
      let errors = 0;
      let i = 0;

      const bar = progress(`producers ${adapter.label}`, opts.duration);
      const start = performance.now();
      const end = start + opts.duration * 1000;
      const produce = async (client: pg.Client) => {
        while (performance.now() < end) {
          const t0 = performance.now();
          try {
            await client.query('begin');
            await adapter.enqueueInTransaction(client, make(i++));
            if (opts.holdMs > 0) await sleep(opts.holdMs);
            await client.query('commit');
            hist.recordMs(performance.now() - t0);
            committed++;
          } catch (err) {
            errors++;
            if (errorSamples.length < MAX_ERROR_SAMPLES)
              errorSamples.push(err instanceof Error ? err.message : String(err));
            await client.query('rollback').catch(() => {});
          }
        }
      };
      const ticker = setInterval(() => bar.update(Math.floor((performance.now() - start) / 1000)), 250);
      await Promise.all(clients.map(produce));
      clearInterval(ticker);
      // Transactions begun before the deadline are let finish; the rate is over the whole time.
      const seconds = (performance.now() - start) / 1000;
      bar.finish(opts.duration);

      const inDatabase = await adapter.pending();
      if (inDatabase !== committed) {
        process.stderr.write(
          `\n!!! producers ${adapter.label}: MISMATCH: ${committed} transactions committed, ` +
            `${inDatabase} jobs in the database (${inDatabase - committed > 0 ? '+' : ''}${inDatabase - committed})\n`,
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
          jobsInDatabase: inDatabase,
          mismatch: inDatabase - committed,
          ...(errorSamples.length ? { errorSamples } : {}),
        },
      };
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => {})));
    }
  },
};
