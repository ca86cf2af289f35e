-- Where a job's state lives when the ring does not hold it: the one statement of which plain table holds which
-- state. Operator reads (queue_counts(), queue_health(), list_jobs(), job_state(), queue_known(), remove_queue())
-- read these states through this view, never from the tables one by one, so a new state or table is added here
-- once.
--   scheduled, retryable          deferred_jobs     at = run_at (when it is due)
--   blocked                       deferred_jobs     at = enqueued_at; waits for its dependencies (flows.sql)
--   available (at the gate)       deferred_jobs     at = enqueued_at; waits for its queue's limits (limit_gate.sql)
--   waiting_external              waiting_jobs      at = waiting_since; due_at = its callback's timeout
--   failed, cancelled, completed  done_entries      at = finished_at (completed: settled by a callback)
--   dlq                           dlq_entries       at = dlq_at
-- Other available jobs, running and most completed jobs live in the ring (list_available(), open_receipts(), closures and
-- compact history). A view, not a function, so each read's filters reach each table's indexes. Read it with the
-- state known when planning (a literal, or a custom plan): each table's check constraint on its states then
-- leaves out the tables that cannot hold it, and an index led by (queue, state) still gives job_id order. (One
-- branch per state with a constant state column pruned without the constraints, but then no index gave the
-- order: a page of 50 failed jobs sorted all 13,000 of a queue's.)
create view {{schema}}.off_ring_jobs as
  select d.job_id, d.state, d.kind, d.queue, d.priority, d.args, d.attempt::int as attempt,
         d.max_attempts::int as max_attempts, d.run_lease, d.enqueued_at, d.meta,
         case when d.state in ('blocked', 'available') then d.enqueued_at else d.run_at end as at,
         case when d.state in ('blocked', 'available') then null else d.run_at end as due_at,
         null::timestamptz as finished_at
    from {{schema}}.deferred_jobs d
  union all
  select w.job_id, 'waiting_external'::text, w.kind, w.queue, w.priority, w.args, w.attempt::int,
         w.max_attempts::int, w.run_lease, w.enqueued_at, w.meta, w.waiting_since, w.timeout_at, null::timestamptz
    from {{schema}}.waiting_jobs w
  union all
  select e.job_id, e.state, e.kind, e.queue, e.priority, e.args, e.attempt::int, e.max_attempts::int, e.run_lease,
         e.enqueued_at, e.meta, e.finished_at, null::timestamptz, e.finished_at
    from {{schema}}.done_entries e
  union all
  select x.job_id, 'dlq'::text, x.kind, x.queue, x.priority, x.args, x.attempt::int, x.max_attempts::int,
         x.run_lease, x.enqueued_at, x.meta, x.dlq_at, null::timestamptz, x.dlq_at
    from {{schema}}.dlq_entries x;

-- The queues those tables name (each table read once, not once per state).
create view {{schema}}.off_ring_queues as
  select d.queue from {{schema}}.deferred_jobs d
  union select w.queue from {{schema}}.waiting_jobs w
  union select e.queue from {{schema}}.done_entries e
  union select x.queue from {{schema}}.dlq_entries x;
