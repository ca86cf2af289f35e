import { toStorableJson } from '../model/jsonb.js';
import type { Queryable } from './database.js';
import type { Schema } from './schema.js';

export interface ProgressWrite {
  claimSlot: number;
  batchId: string;
  idx: number;
  jobId: string;
  runLease: number;
  /** The report as JSON text (encodeProgress: checked when the handler made it). */
  progressJson: string;
}

/** Writes an attempt's progress through the fence; false when the attempt is no longer open. */
export async function writeProgress(db: Queryable, schema: Schema, w: ProgressWrite): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>(
    `select ${schema.ident}.set_progress($1, $2, $3, $4, $5, $6::jsonb) as ok`,
    [w.claimSlot, w.batchId, w.idx, w.jobId, w.runLease, toStorableJson(w.progressJson)],
  );
  return rows[0]?.ok === true;
}
