import type pg from 'pg';
import { InvalidOptionError } from '../model/errors.js';
import { toJobRow, type JobOptions, type JobRow } from '../model/enqueue-options.js';
import { checkFlow, type FlowInput } from '../model/flow.js';
import { kindOf, type JobKind } from '../model/job-kind.js';
import { validateInt, validatePlainObject } from '../model/validation.js';
import {
  withSavepoint,
  withTransaction,
  type ClientPool,
  type EnqueueResult,
  type EnqueuedFlow,
  type ProducerStore,
} from '../storage/index.js';
import type { ProducerTelemetry } from '../telemetry/index.js';
import { assertIterable, runCopyLoad, type CopyEnqueueResult, type JobInput } from './copy-load.js';

// The producer: validates and encodes jobs, then enqueues them one, many or a stream at a time, on the
// caller's transaction when given one. It creates the lanes of queues it has not enqueued to yet outside that
// transaction (see prepareLanes).

export interface EnqueueOptions extends JobOptions {
  /** Run on this client, inside whatever transaction it has open. */
  client?: pg.ClientBase;
}

export interface CopyEnqueueOptions {
  /** Run inside this client's open transaction instead of a transaction of our own. */
  client?: pg.ClientBase;
  /** Rows per COPY chunk (memory bound). Default 20,000. */
  chunkSize?: number;
  onProgress?: (enqueued: number) => void;
}

export class Producer {
  private readonly adHocKinds = new Map<string, JobKind<unknown>>();
  /** Queues whose live lanes, and whose bulk lanes, are known to exist (see prepareLanes). */
  private readonly laneQueues = { live: new Set<string>(), bulk: new Set<string>() };

  constructor(
    private readonly conn: ClientPool,
    private readonly store: ProducerStore,
    private readonly maxPayloadBytes: number,
    private readonly telemetry: ProducerTelemetry,
  ) {}

  async enqueue<Args>(
    kind: JobKind<Args> | string,
    args: Args,
    options?: EnqueueOptions,
  ): Promise<EnqueueResult> {
    // Checked before it is taken apart: spreading an array or a number would hide what was given.
    if (options !== undefined && options !== null) validatePlainObject('options', options);
    const { client, ...jobOptions } = options ?? {};
    const row = await toJobRow(this.kindOf(kind), args, options && jobOptions, this.maxPayloadBytes);
    const send = this.telemetry.begin('enqueue', row.queue);
    return send.run(async () => {
      send.inject([row]);
      const [result] = await this.conn.run('enqueue', client, async (db) => {
        await this.prepareLanes([row], 'live', client !== undefined);
        return this.store.enqueue(db, [row]);
      });
      send.sent([row], result!.inserted ? 0 : 1, result!.id);
      return result!;
    });
  }

  async enqueueMany(
    jobs: readonly JobInput[],
    options?: { client?: pg.ClientBase },
  ): Promise<EnqueueResult[]> {
    if (!Array.isArray(jobs))
      throw new InvalidOptionError('jobs', 'must be an array of { kind, args, options? }');
    const built = jobs.map((j) => this.toRow(j));
    // Only an async schema makes a row a promise; otherwise there is nothing to wait for.
    const rows = built.some((r) => r instanceof Promise) ? await Promise.all(built) : (built as JobRow[]);
    const queue = rows.length > 0 && rows.every((r) => r.queue === rows[0]!.queue) ? rows[0]!.queue : null;
    const send = this.telemetry.begin('enqueueMany', queue);
    return send.run(async () => {
      send.inject(rows);
      const results = await this.conn.run('enqueueMany', options?.client, async (db) => {
        await this.prepareLanes(rows, 'live', options?.client !== undefined);
        return this.store.enqueue(db, rows);
      });
      let duplicates = 0;
      for (const r of results) if (!r.inserted) duplicates++;
      send.sent(rows, duplicates);
      return results;
    });
  }

  /** Enqueues a flow's jobs and their dependencies in one statement (docs/flows.md, "Dependencies"). */
  async enqueueFlow(flow: FlowInput, options?: { client?: pg.ClientBase }): Promise<EnqueuedFlow> {
    const checked = checkFlow(flow);
    const built = checked.jobs.map((j) => this.toRow(j));
    const rows = built.some((r) => r instanceof Promise) ? await Promise.all(built) : (built as JobRow[]);
    const send = this.telemetry.begin('enqueueFlow', null);
    return send.run(async () => {
      send.inject(rows);
      const enqueued = await this.conn.run('enqueueFlow', options?.client, async (db) => {
        await this.prepareLanes(rows, 'live', options?.client !== undefined);
        return this.store.enqueueFlow(
          db,
          checked.name,
          checked.jobs.map((j) => j.name),
          rows,
          checked.edges,
        );
      });
      send.sent(rows, 0);
      return enqueued;
    });
  }

  async copyEnqueue(
    jobs: Iterable<JobInput> | AsyncIterable<JobInput>,
    options: CopyEnqueueOptions = {},
  ): Promise<CopyEnqueueResult> {
    const chunkSize =
      options.chunkSize === undefined ? 20_000 : validateInt('chunkSize', options.chunkSize, 1, 1_000_000);
    assertIterable(jobs);
    const send = this.telemetry.begin('copyEnqueue', null);
    const load = (client: pg.ClientBase) =>
      runCopyLoad(jobs, chunkSize, {
        toRow: (job) => this.toRow(job),
        copy: async (rows) => {
          await this.prepareLanes(rows, 'bulk', true);
          send.inject(rows);
          const duplicates = await this.store.copyEnqueue(client, rows);
          send.sent(rows, duplicates);
          return duplicates;
        },
        onProgress: options.onProgress,
      });
    return send.run(() =>
      this.conn.wrap('copyEnqueue', () =>
        options.client
          ? withSavepoint(options.client, 'copyEnqueue', load)
          : withTransaction(this.conn.pool, this.conn.target, load),
      ),
    );
  }

  /** A queue was removed with its lanes: the next enqueue prepares them again. */
  forgetLanes(queue: string): void {
    this.laneQueues.live.delete(queue);
    this.laneQueues.bulk.delete(queue);
  }

  private kindOf(kind: JobKind<unknown> | string): JobKind<unknown> {
    return kindOf(kind, this.adHocKinds);
  }

  /**
   * Creates the lanes of queues this producer has not enqueued to yet, in a short transaction of its own on
   * the pool, so a caller's open transaction never holds the lane-creation lock (another producer of the same
   * new queue would wait for it). Skipped when the pool has no free connection: the enqueue then creates the
   * lane itself, which is just as correct. Skipped too behind a transaction pooler while a transaction is
   * open (`inTransaction`: the caller's, or a COPY load's own): that transaction holds one of the pooler's
   * server connections, and when transactions waiting the same way hold them all, the one asked for here
   * never comes.
   */
  private async prepareLanes(
    rows: readonly JobRow[],
    kind: 'live' | 'bulk',
    inTransaction: boolean,
  ): Promise<void> {
    const known = this.laneQueues[kind];
    const fresh = [...new Set(rows.map((r) => r.queue))].filter((q) => !known.has(q));
    if (fresh.length === 0) return;
    if (inTransaction && this.conn.pooler === 'transaction') return;
    const p = this.conn.pool;
    if (p.idleCount === 0 && p.totalCount >= (p.options.max ?? 10)) return;
    await this.store.ensureLanes(p, fresh, kind === 'bulk');
    for (const q of fresh) known.add(q);
  }

  private toRow(job: JobInput): JobRow | Promise<JobRow> {
    if (typeof job !== 'object' || job === null) {
      throw new InvalidOptionError('jobs[]', 'each job must be an object { kind, args, options? }');
    }
    return toJobRow(this.kindOf(job.kind), job.args, job.options, this.maxPayloadBytes);
  }
}
