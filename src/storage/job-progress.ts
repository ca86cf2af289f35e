import { isJobId } from '../model/validation.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

// An operator read: the newest progress a job's attempt recorded (sql/functions/reads/job_progress.sql).

export interface JobProgress {
  /** The attempt's fencing token. */
  runLease: number;
  progress: unknown;
  updatedAt: Date;
}

/** The newest recorded progress of job `id`, or null when none is held (never recorded, or cleaned up). */
export async function jobProgress(db: Queryable, schema: Schema, id: string): Promise<JobProgress | null> {
  if (!isJobId(id)) return null;
  const { rows } = await db.query(`select * from ${schema.ident}.job_progress($1::bigint)`, [id]);
  const r = rows[0];
  if (!r) return null;
  return { runLease: Number(r.run_lease), progress: r.progress, updatedAt: r.updated_at };
}
