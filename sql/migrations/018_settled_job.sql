-- One settled attempt on its way to the table its route names. settle_attempts() (handlers, rescue, cancel),
-- settle_waiting() (callbacks and their timeouts) and cancel_job() (jobs not running) hand their settlements to
-- place_settled() in this shape, so where each route writes, and what it writes, is said once
-- (sql/functions/engine/place.sql).
--   attempt: the attempt that ended, counted from 1 (a job cancelled before it ran again: the attempts it had).
--   meta:    the job's meta as it leaves, the attempt's error record already appended (with_error()).
--   route:   failure_route()'s answer: retry, snooze, failed, cancelled, completed or dlq.
--   run_at:  when a retry or snooze is due again (null for the other routes).
--   reason:  the DLQ entry's reason (the error's message).
-- rolling: safe: a new type; nothing the previous release runs reads or writes it
create type {{schema}}.settled_job as (
  job_id       bigint,
  run_lease    bigint,
  kind         text,
  queue        text,
  priority     smallint,
  args         jsonb,
  attempt      int,
  max_attempts smallint,
  enqueued_at  timestamptz,
  meta         jsonb,
  route        text,
  run_at       timestamptz,
  reason       text
);
