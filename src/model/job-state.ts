// Where a job stands: the states every read reports (src/storage, the CLI, the dashboard), in one place that
// imports nothing, so any model file may name them.

export type JobState =
  | 'available'
  | 'scheduled'
  | 'retryable'
  | 'running'
  | 'completed'
  | 'failed'
  | 'cancelled'
  /** Failed for good in a DLQ-enabled queue: held for an operator to retry or purge. */
  | 'dlq'
  /** Parked until an external callback arrives (see docs/callbacks.md). */
  | 'waiting_external'
  /** A job of a flow waiting for the jobs it depends on to end (see docs/flows.md). */
  | 'blocked';

/** Every state a job can be in, for validating filters. */
export const JOB_STATES: readonly JobState[] = [
  'available',
  'scheduled',
  'retryable',
  'blocked',
  'running',
  'waiting_external',
  'completed',
  'failed',
  'cancelled',
  'dlq',
];

/** The states a job ends in: nothing more happens to it unless an operator retries it. */
export const ENDED_STATES: readonly JobState[] = ['completed', 'failed', 'cancelled', 'dlq'];

export function isEnded(state: string): boolean {
  return (ENDED_STATES as readonly string[]).includes(state);
}
