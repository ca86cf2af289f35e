import type pg from 'pg';

// An attempt's progress as the database holds it. Progress has no public read API yet, so this reads
// the engine's attempt_state table: the one place to adapt if the engine stores progress elsewhere.

/** The progress recorded for attempt (jobId, runLease), or undefined when none was written. */
export async function attemptProgress(
  db: pg.Pool | pg.ClientBase,
  jobId: string,
  runLease: number,
  schema = 'awa',
): Promise<unknown> {
  const { rows } = await db.query<{ progress: unknown }>(
    `select progress from "${schema}".attempt_state where job_id = $1 and run_lease = $2`,
    [jobId, runLease],
  );
  return rows[0]?.progress;
}
