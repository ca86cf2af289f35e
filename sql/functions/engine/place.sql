-- Where a settled attempt goes, the one writer of each route's row (settle_attempts(), settle_waiting() and
-- cancel_job() call it; failure_route() chose the route):
--   retry     -> deferred_jobs 'retryable', the attempt counted, due at run_at
--   snooze    -> deferred_jobs 'scheduled', the attempt not counted, due at run_at
--   block     -> deferred_jobs 'blocked', the attempt not counted: waits for the children it spawned (flows.sql)
--   failed, cancelled, completed -> terminal history (done_entries); completed only for a callback's complete
--                (a handler's completion is a closure alone)
--   dlq       -> dlq_entries (a job already there stays as it is)
--   completed also stores the callback's payload as the job's result (job_results), when it carried one
-- Every terminal route (failed, cancelled, completed, dlq) is handed to jobs_ended() (ended.sql): the producers
-- waiting for the job wake, and the flows' edges on it resolve. Other routes (wait, resume) are not placed here: only their own caller writes them. Set-based, so a flush of
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
  -- A job waiting for the children it spawned (flows.sql): blocked, its attempt not spent, and decided at once in
  -- case they all ended while it ran (the lock decide_dependents() takes orders this against their settlers).
  insert into {{schema}}.deferred_jobs
    (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta)
  select j.job_id, j.kind, j.queue, j.priority, j.args, j.attempt - 1, j.max_attempts, j.run_lease, 'infinity',
         'blocked', j.enqueued_at, j.meta
    from unnest(p_jobs) j where j.route = 'block';
  if exists (select 1 from unnest(p_jobs) j where j.route = 'block') then
    perform {{schema}}.decide_dependents(array(select j.job_id from unnest(p_jobs) j where j.route = 'block'));
  end if;
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
  insert into {{schema}}.job_results (job_id, queue, completed_at, result)
  select j.job_id, j.queue, now(), j.meta -> 'result'
    from unnest(p_jobs) j
   where j.route = 'completed' and jsonb_typeof(j.meta -> 'result') is distinct from 'null'
     and j.meta ? 'result'
  on conflict on constraint job_results_pkey do update
    set queue = excluded.queue, completed_at = excluded.completed_at, result = excluded.result;
  -- Those who wait on the jobs ended here (ended.sql): a dependent failed or skipped for them ends through this
  -- function in turn.
  perform {{schema}}.jobs_ended(
    array(select j.job_id from unnest(p_jobs) with ordinality j where j.route in ('failed', 'cancelled', 'completed', 'dlq') order by ordinality),
    array(select j.route from unnest(p_jobs) with ordinality j where j.route in ('failed', 'cancelled', 'completed', 'dlq') order by ordinality));
end
$$;
