-- The dead-letter queue: DLQ entries move back into the ready ring with a fresh attempt counter (the run
-- lease keeps rising, so fencing stays monotonic). A unique job takes its key again on the way back; one
-- whose key another job holds meanwhile stays in the DLQ. Returns the ids moved.
create function {{schema}}.dlq_retry(p_job_ids bigint[]) returns setof bigint
  language plpgsql
  set jit = off
  as $$
declare
  g record;
begin
  for g in
    with wanted as (
      select e.* from {{schema}}.dlq_entries e where e.job_id = any(p_job_ids)
       order by e.job_id for update
    ), free as (
      select w.* from wanted w
       where not w.meta ? 'unique'
          or {{schema}}.unique_acquire(w.meta -> 'unique' ->> 'key', w.job_id,
               array(select jsonb_array_elements_text(w.meta -> 'unique' -> 'states')), '{}') is null
    ), moved as (
      delete from {{schema}}.dlq_entries e using free f where e.job_id = f.job_id returning e.*
    )
    select moved.queue, moved.priority,
           array_agg(row(moved.job_id, moved.kind, moved.args, 0, moved.max_attempts, moved.run_lease,
                         moved.enqueued_at, null, moved.meta)::{{schema}}.job_body order by moved.job_id) as bodies
      from moved group by moved.queue, moved.priority order by moved.queue, moved.priority
  loop
    perform {{schema}}.append_ready(g.queue, g.priority, g.bodies);
    return query select b.job_id from unnest(g.bodies) b;
  end loop;
end
$$;
