// Model-based test, fast profile: random sequences of enqueues (one, many, COPY; on their own transaction or
// a caller's that commits, rolls back or stays open), claims, settlements of every outcome, stale
// settlements, callbacks, operator cancel and retry, rescue after a lost heartbeat, promotion, rotation,
// prune and pause, against the real engine and the reference model side by side; and a queue with limits
// (flow control: keys, per-key and queue concurrency, a per-key rate, strict FIFO, operator overrides; again with
// strict FIFO declared from the start), whose every claim the model predicts exactly (which jobs start, which
// wait at the gate). Seeded (AWA_MODEL_SEED overrides the seed); a failure prints the seed, the path and the
// shrunk sequence as a replayable test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serverUrl } from '../helpers/database.js';
import { STORAGE_VARIANTS } from './variants.js';
import {
  Cancel,
  Claim,
  Enqueue,
  EnqueueLimited,
  Maintain,
  Quiesce,
  RetryJob,
  Settle,
  SetLimits,
} from '../model/commands.js';
import { flowCoverage, resetFlowCoverage } from '../model/flow-control.js';
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

    // The limited queue (flow control): exact claims in situations the random runs reach rarely.
    it('limited: a key over its concurrency waits at the gate; a freed slot lets the oldest through first', async () => {
      await replayCommands(db, [
        // k0, k0, k1, k0 (given as limitKey k1 over tenant k0): k0 runs one, k1 one, the rest wait.
        new EnqueueLimited([0, 1, 2, 4, 0], false, 1),
        new Claim(2, 6, 0),
        new Settle([[0, 'completed']]),
        new EnqueueLimited([0], false, 1),
        new Claim(2, 6, 1),
        new Settle([[0, 'completed']]),
        new Claim(2, 1, 0),
      ]);
    });
    // Found by seed 3 (path 38): a limited claim that sent the last row it read to the gate started nothing, and
    // Quiesce took it for a claim that ran dry; it stopped a claim before the positions rolled back at the
    // lane's tail were passed, and counted them as available.
    it('limited: quiet means two claims that read nothing, not two that started nothing', async () => {
      await replayCommands(db, [
        new EnqueueLimited([3, 0, 0, 2, 0], false, 1),
        new Claim(2, 2, 0),
        new Settle([[19, 'completed']]),
        new Claim(2, 2, 0),
        new Settle([[0, 'completed']]),
        new EnqueueLimited([0, 0], true, 1),
        new Quiesce(),
      ]);
    });
    it('limited: a cancelled row waiting in the lane is read by a claim as one of its rows', async () => {
      await replayCommands(db, [
        new EnqueueLimited([0, 2, 3], false, 1),
        new Cancel(0),
        new Claim(2, 1, 0),
        new Claim(2, 1, 0),
        new Claim(2, 6, 0),
      ]);
    });
    it('limited: strict FIFO keeps a retrying job its key, and it runs again before the next job of its key', async () => {
      await replayCommands(db, [
        new SetLimits('fifo'),
        new EnqueueLimited([0, 0, 2], false, 3),
        new Claim(2, 6, 0),
        new Settle([[0, 'retry-due']]),
        new Claim(2, 6, 0),
        new Maintain('promote', 2),
        new Claim(2, 6, 1),
        new Settle([[0, 'completed']]),
        new Claim(2, 6, 1),
      ]);
    });
    it('limited: lifting every limit opens the gate: its jobs run as in any queue, their holds kept', async () => {
      await replayCommands(db, [
        new EnqueueLimited([0, 0, 0, 2], false, 1),
        new Claim(2, 6, 0),
        new SetLimits('off'),
        new Claim(2, 6, 1),
        new SetLimits('reset'),
        new EnqueueLimited([2], false, 1),
        new Claim(2, 6, 0),
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
      expect(stats.runs).toBeGreaterThan(0);
    }, 240_000);

    it(`random command sequences about the limited queue (seed ${SEED})`, async () => {
      resetFlowCoverage();
      const stats = await runModel(serverUrl(), {
        seed: SEED,
        variant,
        numRuns: 80,
        maxCommands: 30,
        timeLimitMs: 10_000,
        commands: 'limited',
      });
      console.log(
        `[model] limited: ${stats.runs} runs, ${stats.commands} commands, ${JSON.stringify(flowCoverage)}`,
      );
      expect(stats.runs).toBeGreaterThan(0);
    }, 240_000);

    // The same commands with strict FIFO declared, so that every claim of the run is a FIFO claim (an operator's
    // override to FIFO comes late in a random run, if at all: loaded runs of the test above made no FIFO claim).
    it(`random command sequences about a limited queue with strict FIFO per key (seed ${SEED + 1})`, async () => {
      resetFlowCoverage();
      const stats = await runModel(serverUrl(), {
        seed: SEED + 1,
        variant,
        numRuns: 80,
        maxCommands: 30,
        timeLimitMs: 10_000,
        commands: 'limited',
        fifo: true,
      });
      console.log(
        `[model] limited, FIFO: ${stats.runs} runs, ${stats.commands} commands, ${JSON.stringify(flowCoverage)}`,
      );
      expect(stats.runs).toBeGreaterThan(0);
      expect(flowCoverage.fifoClaims).toBeGreaterThan(0);
    }, 240_000);
  },
);
