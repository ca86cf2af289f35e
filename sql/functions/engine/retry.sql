-- Operator retry: a finished, dead-lettered or deferred job runs again.

-- Runs a finished or waiting job again with a fresh attempt counter: failed and cancelled jobs (from terminal
-- history), DLQ entries, and scheduled or retryable jobs (made due now). A unique job takes its key again, or
-- stays where it is when another job holds it. Returns one row: the state it was retried from, or, when it was
-- not retried, why ('not_found', 'not_retryable' in its current state, or 'unique_held' by job held_by).
create function {{schema}}.retry_job(p_id bigint)
  returns table (retried_from text, refused text, state text, held_by bigint)
  language plpgsql
  as $$
declare
  e {{schema}}.done_entries;
  v_meta jsonb;
  v_state text;
begin
  if exists (select 1 from {{schema}}.dlq_retry(array[p_id])) then
    return query select 'dlq'::text, null::text, null::text, null::bigint;
    return;
  end if;
  select d.meta into v_meta from {{schema}}.dlq_entries d where d.job_id = p_id;
  if found then -- still in the DLQ: dlq_retry left it there because another job holds its unique key
    return query select null::text, 'unique_held'::text, 'dlq'::text, {{schema}}.unique_holder(v_meta);
    return;
  end if;
  -- A blocked job of a flow runs when its dependencies allow, and a job at a limited queue's gate when its limits
  -- allow (limit_gate.sql), not before: there is nothing to retry yet.
  select d.state into v_state from {{schema}}.deferred_jobs d
   where d.job_id = p_id and d.state in ('blocked', 'available');
  if found then
    return query select null::text, 'not_retryable'::text, v_state, null::bigint;
    return;
  end if;
  update {{schema}}.deferred_jobs d set run_at = now() where d.job_id = p_id and d.run_at > now();
  if found or exists (select 1 from {{schema}}.deferred_jobs d where d.job_id = p_id) then
    return query select d.state, null::text, d.state, null::bigint from {{schema}}.deferred_jobs d where d.job_id = p_id;
    return;
  end if;
  select * into e from {{schema}}.done_entries x
   where x.job_id = p_id and x.state in ('failed', 'cancelled')
   order by x.run_lease desc limit 1;
  if found and not exists (select 1 from {{schema}}.ready_entries r where r.job_id = p_id and r.run_lease > e.run_lease) then
    if e.meta ? 'unique' and {{schema}}.unique_acquire(e.meta -> 'unique' ->> 'key', e.job_id,
         array(select jsonb_array_elements_text(e.meta -> 'unique' -> 'states')), '{}') is not null then
      return query select null::text, 'unique_held'::text, e.state, {{schema}}.unique_holder(e.meta);
      return;
    end if;
    delete from {{schema}}.done_entries x where x.job_id = e.job_id and x.run_lease = e.run_lease;
    perform {{schema}}.append_ready(e.queue, e.priority, array[row(e.job_id, e.kind, e.args, 0, e.max_attempts,
      e.run_lease, e.enqueued_at, null, e.meta)::{{schema}}.job_body]);
    return query select e.state, null::text, e.state, null::bigint;
    return;
  end if;
  return query select null::text, case when s.state is null then 'not_found' else 'not_retryable' end, s.state,
                      null::bigint
    from (select (select j.state from {{schema}}.job_state(p_id) j) as state) s;
end
$$;

-- The job holding a unique job's key (from its meta), or null.
create function {{schema}}.unique_holder(p_meta jsonb) returns bigint
  language sql stable
  as $$
    select u.job_id from {{schema}}.unique_claims u where u.key = p_meta -> 'unique' ->> 'key'
  $$;
