import type { JobOptions, JobRow } from '../model/enqueue-options.js';
import { InvalidOptionError } from '../model/errors.js';
import type { JobKind } from '../model/job-kind.js';

// One bulk load (copyEnqueue): the input is walked once, its rows are built into chunks, and each full chunk
// is COPYed while the next one is built. The connection carries one COPY at a time, so the database parses
// and indexes one chunk while this process encodes the next, and memory holds at most two chunks.

/** A job for enqueueMany / copyEnqueue. */
export interface JobInput<Args = unknown> {
  kind: JobKind<Args> | string;
  args: Args;
  options?: JobOptions;
}

export interface CopyEnqueueResult {
  inserted: number;
  /** Unique jobs skipped because another job holds their key. */
  duplicates: number;
}

export interface CopyLoadSteps {
  /** The row of one job: synchronous unless its kind's schema is async. */
  toRow(job: JobInput): JobRow | Promise<JobRow>;
  /** Writes one chunk; resolves to how many of its (unique) jobs were duplicates. */
  copy(rows: JobRow[]): Promise<number>;
  onProgress?: (enqueued: number) => void;
}

/** How many rows of the next chunk are built between turns of the event loop. */
const YIELD_EVERY_ROWS = 512;

/** Refuses, before any transaction opens, input that is neither iterable nor async iterable. */
export function assertIterable(jobs: unknown): asserts jobs is Iterable<JobInput> | AsyncIterable<JobInput> {
  const input = jobs as Partial<Iterable<unknown> & AsyncIterable<unknown>> | null | undefined;
  if (
    typeof input === 'object' &&
    input !== null &&
    (typeof input[Symbol.iterator] === 'function' || typeof input[Symbol.asyncIterator] === 'function')
  )
    return;
  throw new InvalidOptionError(
    'jobs',
    'must be an array, an iterable or an async iterable of { kind, args, options? }',
  );
}

export async function runCopyLoad(
  jobs: Iterable<JobInput> | AsyncIterable<JobInput>,
  chunkSize: number,
  steps: CopyLoadSteps,
): Promise<CopyEnqueueResult> {
  const result = { inserted: 0, duplicates: 0 };
  let chunk: JobRow[] = [];
  // The COPY in flight (resolved when none is).
  let copying: Promise<void> = Promise.resolve();
  const copy = async (rows: JobRow[]) => {
    const duplicates = await steps.copy(rows);
    result.inserted += rows.length - duplicates;
    result.duplicates += duplicates;
    steps.onProgress?.(result.inserted + result.duplicates);
  };
  const startCopy = async (rows: JobRow[]) => {
    await copying;
    copying = copy(rows);
    // Observed when awaited (next chunk or the end); until then a failure must not go unhandled.
    copying.catch(() => {});
  };
  // Adds a job's row; returns something to wait for only when there is (an async schema, a yield, a COPY to
  // start), so an ordinary job costs no promise.
  const push = (row: JobRow): Promise<void> | undefined => {
    chunk.push(row);
    if (chunk.length >= chunkSize) {
      const full = chunk;
      chunk = [];
      return startCopy(full);
    }
    // Rows are built without turns of the event loop: yield now and then so the COPY in flight keeps
    // streaming.
    if (chunk.length % YIELD_EVERY_ROWS === 0) return new Promise((r) => setImmediate(r));
    return undefined;
  };
  const add = (job: JobInput): Promise<void> | undefined => {
    const row = steps.toRow(job);
    return row instanceof Promise ? row.then(push) : push(row);
  };
  try {
    // An array or other synchronous iterable is walked as one: for await would cost every job a promise.
    if (typeof (jobs as Partial<Iterable<JobInput>>)[Symbol.iterator] === 'function') {
      for (const job of jobs as Iterable<JobInput>) {
        const pending = add(job);
        if (pending) await pending;
      }
    } else {
      for await (const job of jobs as AsyncIterable<JobInput>) await add(job);
    }
    if (chunk.length > 0) await startCopy(chunk);
  } catch (err) {
    // The rollback that follows must reach the connection after the COPY in flight, not between its
    // reservation and its rows.
    await copying.catch(() => {});
    throw err;
  }
  await copying;
  return result;
}
