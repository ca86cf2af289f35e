-- Producing. enqueue() takes any number of jobs as parallel arrays, in one statement, so it is atomic on a
-- client with or without an open transaction. Unique jobs (meta.unique) take their key first; a duplicate is
-- not inserted and its row reports the job holding the key. Runnable jobs are appended to the ready ring, one
-- lane reservation per (queue, priority), keeping input order within a lane; future ones go to deferred_jobs.
-- Returns one row per input, in input order: the job id and whether it was inserted. Nothing here waits for
-- another producer (see reserve_lane()), except a producer of the same unique key. One runnable job that is
-- not unique, the commonest call, does not come here: src/storage/enqueue.ts inserts its row from
-- reserve_lane() in a statement of its own.
--
-- The input arrays are read with unnest(), never subscripted in a loop: an element of a jsonb array is found
-- by walking the array, so p_args[i] for every i would cost O(n²).
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
  v_taken bigint[] := '{}';
  v_now timestamptz := now();
  g record;
  u record;
begin
  select array_agg(nextval('{{schema}}.job_id_seq')) into v_ids from generate_series(1, v_n);
  if exists (select 1 from unnest(p_metas) m where m ? 'unique') then
    -- The common case in one statement: the first row of the call naming a key takes it when nobody holds it
    -- (in key order, so two producers' batches sharing keys never wait on each other in a cycle).
    with firsts as (
      select distinct on (m.meta -> 'unique' ->> 'key') m.meta -> 'unique' ->> 'key' as key, m.ord,
             array(select jsonb_array_elements_text(m.meta -> 'unique' -> 'states')) as states
        from unnest(p_metas) with ordinality as m(meta, ord)
       where m.meta ? 'unique'
       order by m.meta -> 'unique' ->> 'key', m.ord
    ), taken as (
      insert into {{schema}}.unique_claims (key, job_id, states)
      select f.key, v_ids[f.ord], f.states from firsts f order by f.key
      on conflict (key) do nothing
      returning unique_claims.job_id
    )
    select coalesce(array_agg(f.ord), '{}') into v_taken from firsts f join taken t on t.job_id = v_ids[f.ord];
  end if;
  -- The rest one by one, in input order: later rows of a key this call took (duplicates of its first row)
  -- and keys someone else holds. Every id of this call is passed as "taken": a key row naming one of them can
  -- only have been written by an earlier row of this call (the ids were drawn just now).
  for u in
    select m.meta, m.ord
      from unnest(p_metas) with ordinality as m(meta, ord)
      left join unnest(v_taken) as t(ord) on t.ord = m.ord
     where m.meta ? 'unique' and t.ord is null
     order by m.ord
  loop
    v_holder := {{schema}}.unique_acquire(u.meta -> 'unique' ->> 'key', v_ids[u.ord],
                  array(select jsonb_array_elements_text(u.meta -> 'unique' -> 'states')),
                  v_ids);
    if v_holder is not null then
      v_keep[u.ord] := false;
      v_ids[u.ord] := v_holder;
    end if;
  end loop;
  insert into {{schema}}.deferred_jobs
    (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta)
  select x.id, x.kind, x.queue, x.priority, x.args, 0, x.max_attempts, 0, x.run_at, 'scheduled', v_now, x.meta
    from unnest(v_ids, v_keep, p_kinds, p_queues, p_priorities, p_args, p_max_attempts, p_run_ats, p_metas)
           as x(id, keep, kind, queue, priority, args, max_attempts, run_at, meta)
   where x.keep and x.run_at > v_now;
  for g in
    select x.queue, x.priority, count(*)::int as n
      from unnest(v_keep, p_queues, p_priorities, p_run_ats) as x(keep, queue, priority, run_at)
     where x.keep and (x.run_at is null or x.run_at <= v_now)
     group by 1, 2 order by 1, 2
  loop
    u := {{schema}}.reserve_lane(g.queue, g.priority, g.n, false);
    insert into {{schema}}.ready_entries
      (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, max_attempts, meta)
    select u.slot, u.lane_id, u.first_seq + row_number() over (order by x.ord) - 1, x.id, x.kind, g.queue, g.priority,
           x.args, x.max_attempts, x.meta
      from unnest(v_ids, v_keep, p_kinds, p_queues, p_priorities, p_args, p_max_attempts, p_run_ats, p_metas)
             with ordinality as x(id, keep, kind, queue, priority, args, max_attempts, run_at, meta, ord)
     where x.keep and x.queue = g.queue and x.priority = g.priority and (x.run_at is null or x.run_at <= v_now);
  end loop;
  return query select v_ids[i], v_keep[i] from generate_series(1, v_n) i;
end
$$;
