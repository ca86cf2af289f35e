// The events of a concurrent history (history.ts records them, history-check.ts and history-limits.ts judge
// them): what each actor did and saw, numbered and timed by the run.

export interface SettledItem {
  id: string;
  runLease: number;
  outcome: string;
  accepted: boolean;
  instance?: string;
}

export interface ClaimedItem {
  id: string;
  uid: string;
  runLease: number;
  attempt: number;
  batch: number;
  idx: number;
}

type Base = { t: number; n: number; actor: string };
export type HistoryEvent = Base &
  (
    | { op: 'enqueue'; uids: string[]; queue: string; priority: number; how: string; block: boolean }
    | { op: 'committed' | 'rolled_back' | 'commit_unknown'; uids: string[]; error?: string }
    | { op: 'claimed'; instance: string; queue: string; jobs: ClaimedItem[] }
    | { op: 'claim_lost' | 'stall'; instance: string }
    | { op: 'settled'; sent: number; resend: boolean; items: SettledItem[] }
    | { op: 'settle_unknown'; items: SettledItem[] }
    // sentT: when the rescue was sent (it ended its attempts no earlier).
    | { op: 'rescued'; items: SettledItem[]; sentT?: number }
    // Attempts whose handlers stopped running (before their settlement was sent, or the process was killed).
    | { op: 'attempts_ended'; attempts: { id: string; runLease: number }[] }
    // A limited queue as the database recorded it (history.ts sampler()): a receipt's claim time (µs since
    // the epoch) and the members it started, with their keys; the running attempts per key at one instant.
    | { op: 'receipt'; atUs: number; jobs: { id: string; key: string }[] }
    | { op: 'running_sampled'; byKey: Record<string, number> }
    // Every receipt of the limited queue was read before its slot was pruned (this process led the ring).
    | { op: 'receipts_complete' }
    | { op: 'promoted'; count: number }
    | { op: 'rotated'; slot: number }
    | { op: 'pruned'; slot: number | null; outcome: string }
    | { op: 'terminate'; target: string }
    | { op: 'restart' | 'pin' | 'mid_run' }
    // Durable steps (history.ts steps()): `readSent` is the history's length when the attempt read its job's
    // recorded steps, `sent` when it sent the record; `result` is what the database answered.
    | { op: 'step_run'; id: string; runLease: number; name: string; readSent: number }
    | { op: 'step_replayed'; id: string; runLease: number; name: string; result: unknown }
    | {
        op: 'step_recorded';
        id: string;
        runLease: number;
        name: string;
        sent: number;
        status: string;
        result: unknown;
      }
    | { op: 'step_unknown'; id: string; runLease: number; name: string }
  );

/** An event as an actor records it (the run numbers and times it). */
export type HistoryEntry = HistoryEvent extends infer E
  ? E extends unknown
    ? Omit<E, 't' | 'n'>
    : never
  : never;
