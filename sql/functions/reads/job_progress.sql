-- The newest progress an attempt of job p_id recorded, while its attempt_state row is held (rows of closed
-- attempts are cleaned up, so a finished job usually has none). One primary-key probe, newest lease first.
create function {{schema}}.job_progress(p_id bigint)
  returns table (run_lease bigint, progress jsonb, updated_at timestamptz)
  language sql stable
  set jit = off
  as $$
  select a.run_lease, a.progress, a.updated_at
    from {{schema}}.attempt_state a
   where a.job_id = p_id and a.progress is not null
   order by a.run_lease desc
   limit 1
$$;
