-- Stored results: a handler's return value (or the payload of the callback that completed the job), kept with
-- the completion for as long as its queue's result retention (docs/flows.md, "Results"). One row per job that
-- completed with a result: a job completes once, and a job retried from the DLQ that completes again replaces
-- its row. Written by the statement that settles the completion (settle_attempts(), place_settled() for a
-- callback's completion); deleted by the leader's cleanup(), a bounded number per pass, through the
-- (queue, completed_at) index, one range per queue (each queue may have its own retention).
-- A completion without a result writes nothing here: a drain whose handlers return nothing never touches it.
--
-- result_waiters: producers waiting in AwaClient.result() for a job to end. A waiter inserts its row, LISTENs,
-- then reads the job; the settling statement notifies the result channel for the jobs it ended only when a row
-- names one of them, so a flush nobody waits on pays one probe of this (nearly always empty) table. Unlogged: a
-- waiter is a live process's interest, worthless after a crash (the server empties it), and its writes skip the
-- WAL. A waiter deletes its row when done; the leader's cleanup removes rows a client that died left behind.
-- rolling: safe: new tables only; the functions re-created with them take the previous release's calls unchanged (settle_attempts() and cleanup() gain trailing arguments with defaults)
create table {{schema}}.job_results (
  job_id       bigint primary key,
  queue        text not null,
  completed_at timestamptz not null default now(),
  result       jsonb not null
);
create index job_results_queue_completed on {{schema}}.job_results (queue, completed_at);

create unlogged table {{schema}}.result_waiters (
  job_id bigint not null,
  waiter text not null,
  since  timestamptz not null default now(),
  primary key (job_id, waiter)
);
