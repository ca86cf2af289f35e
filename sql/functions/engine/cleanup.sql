-- History retention and housekeeping, run by the maintenance leader: off the claim/complete loop, bounded per
-- call (p_limit rows of each kind).
-- Stored results go after p_result_retention_secs (null: the completed history's retention), or a queue's own
-- (p_result_queues[i] keeps its results p_result_queue_secs[i]); each queue's range is read through the
-- (queue, completed_at) index, the queues found by skipping from one to the next in it, so a queue that keeps
-- its results longer is never walked.
create function {{schema}}.cleanup(p_failed_retention_secs int, p_dlq_retention_secs int,
    p_completed_retention_secs int, p_limit int, p_result_retention_secs int default null,
    p_result_queues text[] default null, p_result_queue_secs int[] default null)
  returns table (failed bigint, dlq bigint, completed bigint, attempt_states bigint, instances bigint,
                 unique_claims bigint, results bigint)
  language plpgsql
  set jit = off
  as $$
declare
  v_queue text;
  v_secs int;
  v_gone bigint;
begin
  results := 0;
  v_queue := (select min(r.queue) from {{schema}}.job_results r);
  while v_queue is not null and results < p_limit loop
    v_secs := coalesce((select o.secs from unnest(p_result_queues, p_result_queue_secs) o(queue, secs)
                         where o.queue = v_queue limit 1),
                       p_result_retention_secs, p_completed_retention_secs);
    with gone as (
      delete from {{schema}}.job_results r where r.job_id = any(array(
        select x.job_id from {{schema}}.job_results x
         where x.queue = v_queue and x.completed_at < now() - make_interval(secs => v_secs)
         order by x.completed_at limit p_limit - results))
      returning 1)
    select count(*) into v_gone from gone;
    results := results + v_gone;
    v_queue := (select min(r.queue) from {{schema}}.job_results r where r.queue > v_queue);
  end loop;
  -- Waiters a client left behind (it died, or its connection did before it could delete its row).
  delete from {{schema}}.result_waiters w where w.since < now() - interval '1 day';
  with gone as (
    delete from {{schema}}.done_entries d where (d.job_id, d.run_lease) in (
      select x.job_id, x.run_lease from {{schema}}.done_entries x
       where x.finished_at < now() - make_interval(secs => p_failed_retention_secs) limit p_limit)
    returning 1)
  select count(*) into failed from gone;
  with gone as (
    delete from {{schema}}.dlq_entries d where d.job_id in (
      select x.job_id from {{schema}}.dlq_entries x
       where x.dlq_at < now() - make_interval(secs => p_dlq_retention_secs) limit p_limit)
    returning 1)
  select count(*) into dlq from gone;
  with gone as (
    delete from {{schema}}.completed_history h where h.ctid = any(array(
      select x.ctid from {{schema}}.completed_history x
       where x.closed_at < now() - make_interval(secs => p_completed_retention_secs) limit p_limit))
    returning 1)
  select count(*) into completed from gone;
  -- Attempt state of attempts that ended (closed receipt member, or receipt already pruned).
  with gone as (
    delete from {{schema}}.attempt_state s where (s.job_id, s.run_lease) in (
      select x.job_id, x.run_lease from {{schema}}.attempt_state x
       cross join lateral (select {{schema}}.receipt_slot(x.claim_slot, x.batch_id) as slot) rs
       where not exists (select 1 from {{schema}}.claim_batches cb where cb.slot = rs.slot and cb.batch_id = x.batch_id)
          or exists (select 1 from {{schema}}.closure_batches c
                      where c.slot = rs.slot and c.batch_id = x.batch_id and c.idxs @> x.idx)
       limit p_limit)
    returning 1)
  select count(*) into attempt_states from gone;
  with gone as (
    delete from {{schema}}.runtime_instances ri
     where ri.heartbeat_at < now() - interval '1 day'
       and not exists (select 1 from {{schema}}.claim_batches cb where cb.instance_id = ri.instance_id)
    returning 1)
  select count(*) into instances from gone;
  -- Descriptor reports of hosts gone for a day.
  delete from {{schema}}.descriptor_reports d where d.reported_at < now() - interval '1 day';
  -- Rate logs' rows older than any period (at most a day, src/model/limits.ts): no window reads them again.
  delete from {{schema}}.limit_starts ls where ls.ctid = any(array(
    select x.ctid from {{schema}}.limit_starts x where x.at < now() - interval '1 day' limit p_limit));
  unique_claims := {{schema}}.unique_cleanup(p_limit);
  return next;
end
$$;
