-- How job p_id ended, for a producer waiting on it (AwaClient.result()): its state, its stored result when it
-- completed (job_results), and its newest error record when it failed, went to the DLQ or was cancelled. No row
-- when the job never existed or its history passed retention. One snapshot.
create function {{schema}}.job_outcome(p_id bigint)
  returns table (state text, result jsonb, last_error jsonb)
  language sql stable
  as $$
    select s.state,
           case when s.state = 'completed'
                then (select r.result from {{schema}}.job_results r where r.job_id = p_id) end,
           case when s.state in ('failed', 'dlq', 'cancelled') then s.meta -> 'errors' -> -1 end
      from {{schema}}.job_state(p_id) s
  $$;
