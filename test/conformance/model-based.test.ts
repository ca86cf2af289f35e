// Model-based test, fast profile: random sequences of enqueues (one, many, COPY; on their own transaction or
// a caller's that commits, rolls back or stays open), claims, settlements of every outcome, stale
// settlements, callbacks, operator cancel and retry, rescue after a lost heartbeat, promotion, rotation,
// prune and pause, against the real engine and the reference model side by side. Seeded (AWA_MODEL_SEED
// overrides the seed); a failure prints the seed, the path and the shrunk sequence as a replayable test.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { serverUrl } from '../helpers/database.js';
import { STORAGE_VARIANTS } from './variants.js';
import { Cancel, Claim, Enqueue, RetryJob } from '../model/commands.js';
import { createModelDatabase, type ModelDatabase } from '../model/engine.js';
import { replayCommands, runModel } from '../model/run-model.js';

const SEED = Number(process.env.AWA_MODEL_SEED ?? 20261206);

describe.each(STORAGE_VARIANTS)(
  'model-based ($name storage): it agrees with the reference model after every step',
  (variant) => {
    let db: ModelDatabase;
    beforeAll(async () => {
      db = await createModelDatabase(serverUrl(), 'mb', undefined, variant);
    });
    afterAll(async () => {
      await db?.drop();
    });

    // Shrunk sequences the random runs found (seed 20261206). A job cancelled while available and retried has a
    // second ready row at the same run lease; getJob and cancel read the cancelled one: the claimed job read as
    // available, and a second cancel was refused.
    it('replay: a job cancelled while available, retried and claimed reads as running', async () => {
      await replayCommands(db, [
        new Enqueue('one', 1, 1, 2, 'auto', 'now', 1, null),
        new Cancel(0),
        new RetryJob(0),
        new Claim(1, 2, 0),
      ]);
    });
    it('replay: a job cancelled while available and retried can be cancelled again', async () => {
      await replayCommands(db, [
        new Enqueue('one', 0, 1, 2, 'auto', 'now', 3, 1),
        new Cancel(25),
        new RetryJob(40),
        new Cancel(6),
      ]);
    });

    it(`random command sequences (seed ${SEED})`, async () => {
      console.log(`[model] seed ${SEED}`);
      const stats = await runModel(serverUrl(), {
        seed: SEED,
        variant,
        numRuns: 80,
        maxCommands: 30,
        timeLimitMs: 20_000,
      });
      console.log(`[model] ${stats.runs} runs, ${stats.commands} commands`);
    }, 240_000);
  },
);
