import { performance } from 'node:perf_hooks';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { format } from 'node:util';
import { receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import { Packr, Unpackr } from 'msgpackr';
import { move } from 'piscina';
import type { Job } from '../model/job.js';
import { encodeProgress, encodeResult } from '../model/payload.js';
import { StepsNeedInlineError } from '../model/steps.js';
import {
  ownBytes,
  toWireError,
  type AbortMessage,
  type PoolJobContext,
  type PoolTask,
  type ThreadMessage,
  type WireOutcome,
} from './protocol.js';

// Piscina entry point of the worker-thread pool. Each thread loads the user's handlers module once (by
// the path the coordinator put in workerData) and runs batches of jobs. Every job gets its own
// AbortSignal and its own outcome: a throw fails that job only. A crash or process.exit() ends the
// thread; the coordinator fails the attempts it had not heard about yet and Piscina starts a new thread.

type Handle = (job: Job, ctx: PoolJobContext) => unknown;

const packr = new Packr({ useRecords: false });
const unpackr = new Unpackr({ useRecords: false });
/** Outcomes known for this long are posted at once instead of waiting for the end of the batch. */
const EARLY_FLUSH_MS = 2;

const moduleSpec: unknown = (workerData as { module?: unknown } | null)?.module;
// Start loading as soon as the thread exists, so the first batch does not pay for it. A failure is not
// fatal here (a thread that fails while booting makes Piscina stop replacing threads): each batch awaits
// the same promise and reports the error on its jobs, and the next batch tries again.
let handlers: Promise<Map<string, Handle>> | undefined = loadHandlers(moduleSpec);
handlers.catch(() => {});

async function loadHandlers(spec: unknown): Promise<Map<string, Handle>> {
  if (typeof spec !== 'string')
    throw new Error('pool thread started without a handlers module (workerData.module)');
  const url = spec.startsWith('file:') ? spec : pathToFileURL(spec).href;
  let mod: { handlers?: unknown; default?: unknown };
  try {
    // TypeScript modules (tests, tsx dev runs) go through require(): on Node 20, tsx's ESM hooks are
    // not active inside worker threads, its CommonJS hook is. Everything else is a plain import().
    mod = /\.[cm]?ts$/.test(url)
      ? (createRequire(url)(fileURLToPath(url)) as typeof mod)
      : ((await import(url)) as typeof mod);
  } catch (err) {
    throw new Error(
      `pool thread could not load handlers module ${url}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  const list = mod.handlers ?? mod.default;
  if (!Array.isArray(list)) {
    throw new Error(
      `${url} must export \`handlers\` (or a default export): an array of defineHandler(kind, fn)`,
    );
  }
  const map = new Map<string, Handle>();
  for (const entry of list as { kind?: { kind?: unknown }; handle?: unknown }[]) {
    const kind = entry?.kind?.kind;
    if (typeof kind === 'string' && typeof entry.handle === 'function') map.set(kind, entry.handle as Handle);
  }
  return map;
}

export default async function runBatch(task: PoolTask): Promise<Uint8Array | null> {
  const { port } = task;
  const jobs = unpackr.unpack(task.jobs) as Job[];
  const controllers = jobs.map(() => new AbortController());
  const done = new Uint8Array(jobs.length);
  let pending: WireOutcome[] = [];
  let lastFlush = performance.now();

  const flush = (): void => {
    if (pending.length === 0) return;
    const b = ownBytes(packr.pack(pending));
    pending = [];
    port.postMessage({ t: 'done', b } satisfies ThreadMessage, [b.buffer]);
    lastFlush = performance.now();
  };
  const settle = (i: number, thrown: unknown, failed: boolean, value?: unknown): void => {
    if (done[i]) return;
    let result: string | undefined;
    if (!failed && value !== undefined && !(value instanceof Error)) {
      // Encoded and checked here, as inline: a result that cannot be stored fails the job with the reason.
      try {
        result = encodeResult(jobs[i]!.kind, value);
      } catch (err) {
        thrown = err;
        failed = true;
      }
    }
    done[i] = 1;
    pending.push(failed ? [i, toWireError(thrown)] : result === undefined ? [i, null] : [i, null, result]);
    if (performance.now() - lastFlush >= EARLY_FLUSH_MS) flush();
  };
  const onMessage = (m: AbortMessage): void => {
    if (m.t !== 'abort') return;
    const reason = new Error(m.message);
    reason.name = m.name;
    controllers[m.i]?.abort(reason);
  };
  // Aborts for jobs not started yet are taken synchronously before each start: a batch-mate stuck in
  // CPU work cannot let the event loop deliver them, and an aborted job is then never started at all.
  const takeAborts = (): void => {
    for (let m = receiveMessageOnPort(port); m; m = receiveMessageOnPort(port))
      onMessage(m.message as AbortMessage);
  };
  port.on('message', onMessage);

  try {
    let map: Map<string, Handle>;
    try {
      map = await (handlers ??= loadHandlers(moduleSpec));
    } catch (err) {
      handlers = undefined; // a later batch tries again (the file may have been fixed or was mid-deploy)
      for (let i = 0; i < jobs.length; i++) settle(i, err, true);
      return finalOutcomes(pending);
    }
    // From here on the coordinator treats a job that ignores its abort as this thread's fault.
    port.postMessage({ t: 'start' } satisfies ThreadMessage);
    const running: Promise<void>[] = [];
    for (let i = 0; i < jobs.length; i++) {
      takeAborts();
      const job = jobs[i]!;
      const signal = controllers[i]!.signal;
      if (signal.aborted) {
        settle(i, signal.reason, true);
        continue;
      }
      const handle = map.get(job.kind);
      if (!handle) {
        settle(i, new Error(`the pool's handlers module has no handler for job kind "${job.kind}"`), true);
        continue;
      }
      const ctx = jobContext(port, i, job.kind, signal);
      let result: unknown;
      try {
        result = handle(job, ctx);
      } catch (err) {
        settle(i, err, true);
        continue;
      }
      if (isPromiseLike(result)) {
        running.push(
          Promise.resolve(result).then(
            (value) => settle(i, undefined, false, value),
            (err: unknown) => settle(i, err, true),
          ),
        );
      } else {
        settle(i, undefined, false, result);
      }
    }
    await Promise.all(running);
    return finalOutcomes(pending);
  } finally {
    port.off('message', onMessage);
  }
}

function jobContext(port: MessagePort, i: number, kind: string, signal: AbortSignal): PoolJobContext {
  const ctx: PoolJobContext = {
    signal,
    log(...args: unknown[]) {
      port.postMessage({ t: 'log', i, line: format(...args) } satisfies ThreadMessage);
    },
    progress(value: unknown) {
      // Checked here, so a value that cannot be stored throws at this call, as it does inline.
      encodeProgress(kind, value);
      port.postMessage({ t: 'progress', i, v: value } satisfies ThreadMessage);
    },
  };
  // Not in PoolJobContext's type (durable steps need execution: 'inline'): here so a handler that calls one
  // anyway (plain JavaScript, a cast) gets that said rather than "is not a function".
  return Object.assign(ctx, {
    step: () => Promise.reject(new StepsNeedInlineError(kind, 'step')),
    sleep: () => Promise.reject(new StepsNeedInlineError(kind, 'sleep')),
    sleepUntil: () => Promise.reject(new StepsNeedInlineError(kind, 'sleepUntil')),
  });
}

/** The outcomes not posted early travel back as the task's result, moved rather than copied. */
function finalOutcomes(pending: WireOutcome[]): Uint8Array | null {
  if (pending.length === 0) return null;
  return move(ownBytes(packr.pack(pending))) as Uint8Array;
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
