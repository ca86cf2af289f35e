-- How job p_id ended, for a producer waiting on it (AwaClient.result()): its state, its stored result when it
-- completed (job_results), and its newest error record when it failed, went to the DLQ or was cancelled. No row
-- when the job never existed or its history passed retention. One snapshot per read: the state and the result
-- it names are read together. A job found nowhere is read again in a statement of its own, as holder_blocks()
-- does (see there): a read that waited for a prune truncating the job's slot found it gone, and its waiter was
-- told "not found" for a job that was running or had completed (prune-snapshot.test.ts). Volatile, so that each
-- read takes a snapshot of its own; PL/pgSQL, so that it is one statement run twice.
create function {{schema}}.job_outcome(p_id bigint)
  returns table (state text, result jsonb, last_error jsonb)
  language plpgsql
  as $$
begin
  for i in 1..2 loop
    return query
      select s.state,
             case when s.state = 'completed'
                  then (select r.result from {{schema}}.job_results r where r.job_id = p_id) end,
             case when s.state in ('failed', 'dlq', 'cancelled') then s.meta -> 'errors' -> -1 end
        from {{schema}}.job_state(p_id) s;
    exit when found;
  end loop;
end
$$;
