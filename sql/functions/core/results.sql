-- Waking the producers that wait for a job to end (AwaClient.result(), docs/flows.md "Results"). Every path that
-- ends a job calls notify_results() with the ids it ended, after its writes, in its own transaction: the handler's
-- completion and every failure, cancel and callback through settle_attempts() and place_settled(). The
-- notification ("<job id>" on the result channel) is sent at commit, so a waiter that hears it reads the end.
--
-- Nobody waits, nearly always: then this is one probe of result_waiters, which is empty. A waiter inserts its row
-- (result_wait_begin()) under this same lock, exclusive, and reads the job after it; a settler takes the lock
-- shared before it looks for waiters. So either the waiter's row committed before the settler looked (the
-- settler sees it and notifies), or the settler had looked and the waiter's insert waited for its commit (the
-- waiter's read sees the end). Without the lock a settler whose look came just before the waiter's insert, and
-- whose commit came just after the waiter's read, would leave the waiter asleep until its timeout.
-- True when some producer waits for a job's end; takes the lock above (shared) first.
create function {{schema}}.results_awaited() returns boolean
  language plpgsql
  as $$
begin
  perform pg_advisory_xact_lock_shared({{schema}}.lock_ns('result_waiters'), 0);
  -- A statement of its own, so a snapshot of its own: it sees every waiter that committed before the lock was
  -- granted.
  return exists (select 1 from {{schema}}.result_waiters);
end
$$;

-- Notifies the waiters of these jobs, which this transaction ended.
create function {{schema}}.notify_results(p_job_ids bigint[]) returns void
  language plpgsql
  as $$
begin
  if coalesce(cardinality(p_job_ids), 0) = 0 or not {{schema}}.results_awaited() then
    return;
  end if;
  perform pg_notify('awa:{{schema}}:result', w.job_id::text)
     from (select distinct x.job_id from {{schema}}.result_waiters x where x.job_id = any(p_job_ids)) w;
end
$$;
