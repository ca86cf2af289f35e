-- Where a settled attempt goes, the one writer of each route's row (settle_attempts(), settle_waiting() and
-- cancel_job() call it; failure_route() chose the route):
--   retry     -> deferred_jobs 'retryable', the attempt counted, due at run_at
--   snooze    -> deferred_jobs 'scheduled', the attempt not counted, due at run_at
--   failed, cancelled, completed -> terminal history (done_entries); completed only for a callback's complete
--                (a handler's completion is a closure alone)
--   dlq       -> dlq_entries (a job already there stays as it is)
-- Other routes (wait, resume) are not placed here: only their own caller writes them. Set-based, so a flush of
-- 512 failures is four statements, not 512 calls. (PL/pgSQL with a generic plan: its statements are planned
-- once per session, not on every flush.)
create function {{schema}}.place_settled(p_jobs {{schema}}.settled_job[]) returns void
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  as $$
begin
  insert into {{schema}}.deferred_jobs
    (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta)
  select j.job_id, j.kind, j.queue, j.priority, j.args,
         case when j.route = 'retry' then j.attempt else j.attempt - 1 end, j.max_attempts, j.run_lease,
         j.run_at, case when j.route = 'retry' then 'retryable' else 'scheduled' end, j.enqueued_at, j.meta
    from unnest(p_jobs) j where j.route in ('retry', 'snooze');
  insert into {{schema}}.done_entries
    (job_id, run_lease, state, kind, queue, priority, args, attempt, max_attempts, enqueued_at, meta)
  select j.job_id, j.run_lease, j.route, j.kind, j.queue, j.priority, j.args, j.attempt, j.max_attempts,
         j.enqueued_at, j.meta
    from unnest(p_jobs) j where j.route in ('failed', 'cancelled', 'completed');
  insert into {{schema}}.dlq_entries
    (job_id, run_lease, kind, queue, priority, args, attempt, max_attempts, enqueued_at, reason, meta)
  select j.job_id, j.run_lease, j.kind, j.queue, j.priority, j.args, j.attempt, j.max_attempts, j.enqueued_at,
         j.reason, j.meta
    from unnest(p_jobs) j where j.route = 'dlq'
  on conflict on constraint dlq_entries_pkey do nothing;
end
$$;
