-- Producing. enqueue() takes any number of jobs as parallel arrays, in one statement, so it is atomic on a
-- client with or without an open transaction. Unique jobs (meta.unique) take their key first; a duplicate is
-- not inserted and its row reports the job holding the key. Runnable jobs are appended to the ready ring, one
-- lane reservation per (queue, priority), keeping input order within a lane; future ones go to deferred_jobs.
-- Returns one row per input, in input order: the job id and whether it was inserted. Nothing here waits for
-- another producer (see reserve_lane()), except a producer of the same unique key.
create function {{schema}}.enqueue(p_kinds text[], p_queues text[], p_priorities smallint[], p_args jsonb[],
    p_max_attempts smallint[], p_run_ats timestamptz[], p_metas jsonb[])
  returns table (job_id bigint, inserted boolean)
  language plpgsql
  as $$
declare
  v_n int := cardinality(p_kinds);
  v_ids bigint[];
  v_keep boolean[] := array_fill(true, array[v_n]);
  v_holder bigint;
  g record;
begin
  -- The common case, one runnable job that is not unique (an application enqueuing inside its own
  -- transaction): one reservation and one insert, nothing else.
  if v_n = 1 and (p_run_ats[1] is null or p_run_ats[1] <= now()) and not coalesce(p_metas[1] ? 'unique', false) then
    select * into g from {{schema}}.reserve_lane(p_queues[1], p_priorities[1], 1);
    insert into {{schema}}.ready_entries (slot, lane_id, lane_seq, kind, queue, priority, args, max_attempts, meta)
      values (g.slot, g.lane_id, g.first_seq, p_kinds[1], p_queues[1], p_priorities[1], p_args[1], p_max_attempts[1],
              p_metas[1])
      returning ready_entries.job_id into job_id;
    inserted := true;
    return next;
    return;
  end if;
  select array_agg(nextval('{{schema}}.job_id_seq')) into v_ids from generate_series(1, v_n);
  if exists (select 1 from unnest(p_metas) m where m ? 'unique') then
    for i in 1..v_n loop
      continue when p_metas[i] is null or not p_metas[i] ? 'unique';
      v_holder := {{schema}}.unique_acquire(p_metas[i] -> 'unique' ->> 'key', v_ids[i],
                    array(select jsonb_array_elements_text(p_metas[i] -> 'unique' -> 'states')),
                    array(select v_ids[k] from generate_series(1, i - 1) k where v_keep[k]));
      if v_holder is not null then
        v_keep[i] := false;
        v_ids[i] := v_holder;
      end if;
    end loop;
  end if;
  insert into {{schema}}.deferred_jobs
    (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta)
  select v_ids[i], p_kinds[i], p_queues[i], p_priorities[i], p_args[i], 0, p_max_attempts[i], 0, p_run_ats[i],
         'scheduled', now(), p_metas[i]
    from generate_series(1, v_n) i
   where v_keep[i] and p_run_ats[i] > now();
  for g in
    select p_queues[i] as queue, p_priorities[i] as priority,
           array_agg(row(v_ids[i], p_kinds[i], p_args[i], 0, p_max_attempts[i], 0, null, null, p_metas[i])::{{schema}}.job_body
                     order by i) as bodies
      from generate_series(1, v_n) i
     where v_keep[i] and (p_run_ats[i] is null or p_run_ats[i] <= now())
     group by 1, 2 order by 1, 2
  loop
    perform {{schema}}.append_ready(g.queue, g.priority, g.bodies);
  end loop;
  return query select v_ids[i], v_keep[i] from generate_series(1, v_n) i order by i;
end
$$;
