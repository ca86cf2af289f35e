// The storage variants the conformance suite runs against: each is the contract (src/storage/contract.ts)
// built for a schema, plus the few hooks a test needs to move time for rows the contract never exposes (a
// deferred job's run time, a parked attempt's timeout, an instance's heartbeat) and to find what a COPY
// inserted. A new storage engine joins the suite by adding itself here.
import type pg from 'pg';
import { ringStorage, type Schema, type Storage } from '../../src/storage/operations.js';

type Db = pg.Pool | pg.ClientBase;

export interface VariantHooks {
  /** Seconds until each deferred (scheduled or retryable) job of `ids` is due. */
  deferredDueIn(db: Db, schema: Schema, ids: readonly string[]): Promise<{ id: string; secs: number }[]>;
  /** Moves the due time of deferred jobs: `ids`, or every one of `queues` (only those not due yet when
   * `pendingOnly`). */
  setDeferredDue(
    db: Db,
    schema: Schema,
    target: { ids: readonly string[] } | { queues: readonly string[]; pendingOnly?: boolean },
    inSeconds: number,
  ): Promise<void>;
  /** Makes a parked attempt's callback timeout already passed. */
  expireCallbackTimeout(db: Db, schema: Schema, jobId: string): Promise<void>;
  /** Sets when instances last heartbeated, `secondsAgo` before now. */
  setHeartbeatAge(db: Db, schema: Schema, instances: readonly string[], secondsAgo: number): Promise<void>;
  /** The ids of jobs by the `uid` each carries in its args (a COPY load returns counts, not ids). */
  idsByUid(db: Db, schema: Schema, uids: readonly string[]): Promise<Map<string, string>>;
  /** Deletes instances' rows (a run cleaning up after itself). */
  forgetInstances(db: Db, schema: Schema, instances: readonly string[]): Promise<void>;
}

export interface StorageVariant {
  name: string;
  create(schema: Schema): Storage;
  hooks: VariantHooks;
}

/** The engine Awa ships: sql/'s ring of slots. */
export const ringVariant: StorageVariant = {
  name: 'ring',
  create: ringStorage,
  hooks: {
    async deferredDueIn(db, schema, ids) {
      const { rows } = await db.query<{ id: string; secs: number }>(
        `select job_id::text as id, extract(epoch from run_at - now())::float8 as secs
           from ${schema.ident}.deferred_jobs where job_id = any($1::bigint[])`,
        [ids],
      );
      return rows;
    },
    async setDeferredDue(db, schema, target, inSeconds) {
      if ('ids' in target)
        await db.query(
          `update ${schema.ident}.deferred_jobs set run_at = now() + make_interval(secs => $2)
            where job_id = any($1::bigint[])`,
          [target.ids, inSeconds],
        );
      else
        await db.query(
          `update ${schema.ident}.deferred_jobs set run_at = now() + make_interval(secs => $2)
            where queue = any($1::text[]) and ($3 is not true or run_at > now())
              and state not in ('blocked', 'available')`,
          [target.queues, inSeconds, target.pendingOnly === true],
        );
    },
    async expireCallbackTimeout(db, schema, jobId) {
      await db.query(
        `update ${schema.ident}.waiting_jobs set timeout_at = now() - interval '1 second' where job_id = $1`,
        [jobId],
      );
    },
    async setHeartbeatAge(db, schema, instances, secondsAgo) {
      await db.query(
        `update ${schema.ident}.runtime_instances set heartbeat_at = now() - make_interval(secs => $2)
          where instance_id = any($1::text[])`,
        [instances, secondsAgo],
      );
    },
    async idsByUid(db, schema, uids) {
      const { rows } = await db.query<{ id: string; uid: string }>(
        `select job_id::text as id, args->>'uid' as uid from ${schema.ident}.ready_entries
          where args->>'uid' = any($1::text[])`,
        [uids],
      );
      return new Map(rows.map((r) => [r.uid, r.id]));
    },
    async forgetInstances(db, schema, instances) {
      await db.query(`delete from ${schema.ident}.runtime_instances where instance_id = any($1::text[])`, [
        instances,
      ]);
    },
  },
};

export const STORAGE_VARIANTS: readonly StorageVariant[] = [ringVariant];
