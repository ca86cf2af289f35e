-- A producer waiting for a job to end (AwaClient.result(), docs/flows.md "Results"): the waiter's row, which
-- makes the statements that end the job notify the result channel (notify_results(), core/results.sql).
--
-- result_wait_begin() inserts the row under the waiters' lock, exclusive, and then reads the job in a statement
-- of its own: a settler that looked for waiters before this insert holds the lock shared until it commits, so
-- the read comes after that commit and sees the end; a settler that looks after it sees the row. Either way the
-- end is read here or notified. The waiter must already LISTEN on the result channel. A job that has ended (or
-- is unknown) needs no row: it is deleted before the call returns.
create function {{schema}}.result_wait_begin(p_job_id bigint, p_waiter text)
  returns table (state text, result jsonb, last_error jsonb)
  language plpgsql
  set jit = off
  as $$
begin
  perform pg_advisory_xact_lock({{schema}}.lock_ns('result_waiters'), 0);
  insert into {{schema}}.result_waiters (job_id, waiter) values (p_job_id, p_waiter)
    on conflict (job_id, waiter) do update set since = now();
  select o.state, o.result, o.last_error into state, result, last_error
    from {{schema}}.job_outcome(p_job_id) o;
  if state is null or state in ('completed', 'failed', 'dlq', 'cancelled') then
    delete from {{schema}}.result_waiters w where w.job_id = p_job_id and w.waiter = p_waiter;
  end if;
  if state is not null then
    return next;
  end if;
end
$$;

-- The waiter is done (the job ended, its wait timed out, or its client closed).
create function {{schema}}.result_wait_end(p_job_id bigint, p_waiter text) returns void
  language sql
  as $$ delete from {{schema}}.result_waiters w where w.job_id = p_job_id and w.waiter = p_waiter $$;
