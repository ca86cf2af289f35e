-- External callbacks (see docs/callbacks.md). A running attempt registers a callback through its fence and
-- gets a token bound to that attempt. Then it either parks (settle_attempts() outcome 'wait': the body moves to
-- waiting_jobs, the receipt member closes, the permit is freed) or waits inside its handler (the receipt stays
-- open; the callback is recorded on the attempt and announced to its host). A token settles its attempt once:
-- a callback for an older attempt, a second callback, or one after cancel, rescue or timeout finds nothing and
-- changes nothing.

-- Registers a callback for attempt (job, run lease) while its receipt member is open; returns its token, or
-- null when the attempt is no longer open. A second registration replaces the first token.
create function {{schema}}.register_callback(p_slot smallint, p_batch bigint, p_idx int, p_job_id bigint,
    p_lease bigint, p_timeout_ms int) returns uuid
  language plpgsql
  as $$
declare
  v_slot smallint := {{schema}}.open_member_slot(p_slot, p_batch, p_idx, p_lease);
  v_token uuid;
begin
  if v_slot is null then
    return null;
  end if;
  insert into {{schema}}.attempt_state (job_id, run_lease, claim_slot, batch_id, idx, callback_token, callback_timeout_at)
    values (p_job_id, p_lease, v_slot, p_batch, p_idx, gen_random_uuid(),
            case when p_timeout_ms > 0 then now() + make_interval(secs => p_timeout_ms / 1000.0) end)
  on conflict (job_id, run_lease) do update
    set callback_token = excluded.callback_token, callback_timeout_at = excluded.callback_timeout_at,
        callback_result = null, callback_at = null, updated_at = now()
  returning callback_token into v_token;
  return v_token;
end
$$;

-- Settles a parked job as its callback (or its timeout) says, and returns where it went:
--   complete -> terminal history 'completed'
--   retry    -> retryable after p_run_at or backoff, while attempts remain; on the last attempt as fail
--   fail     -> 'failed' (or the DLQ on a queue with the DLQ on), attempt counted
--   cancel   -> 'cancelled'
--   resume   -> back into the ready ring, same attempt, the payload on the job (meta.callback)
-- Retry and fail go by failure_route(), the rule every failed attempt follows; place_settled() writes every route
-- but resume, as it does for settle_attempts().
create function {{schema}}.settle_waiting(w {{schema}}.waiting_jobs, p_action text, p_payload jsonb,
    p_run_at timestamptz, p_error jsonb) returns text
  language plpgsql
  as $$
declare
  v_route text := {{schema}}.failure_route(w.queue, case p_action when 'fail' then 'failed' else p_action end,
                                           w.attempt, w.max_attempts);
  v_meta jsonb := {{schema}}.with_error(w.meta, p_error);
begin
  if v_route = 'resume' then
    perform {{schema}}.append_ready(w.queue, w.priority, array[row(w.job_id, w.kind, w.args, w.attempt - 1,
      w.max_attempts, w.run_lease, w.enqueued_at, now(),
      coalesce(w.meta, '{}') || jsonb_build_object('callback', jsonb_build_object('payload', p_payload, 'at', now()))
      )::{{schema}}.job_body]);
  else
    perform {{schema}}.place_settled(array[row(w.job_id, w.run_lease, w.kind, w.queue, w.priority, w.args,
      w.attempt, w.max_attempts, w.enqueued_at,
      case when v_route = 'complete' then coalesce(w.meta, '{}') || jsonb_build_object('result', p_payload)
           else v_meta end,
      case v_route when 'complete' then 'completed' when 'cancel' then 'cancelled' else v_route end,
      case when v_route = 'retry' then coalesce(p_run_at, now() + {{schema}}.backoff(w.attempt)) end,
      p_error ->> 'error')::{{schema}}.settled_job]);
  end if;
  return v_route;
end
$$;

-- Delivers a callback. Returns one row: outcome 'settled' (a parked job was settled), 'delivered' (recorded on
-- an attempt waiting in its handler, whose host is notified), or 'rejected' (no open attempt holds this token:
-- unknown, already used, or its attempt ended by cancel, rescue or timeout), with the job and run lease when
-- known. p_error is the error record for fail/retry/cancel.
create function {{schema}}.resolve_callback(p_token uuid, p_action text, p_payload jsonb, p_run_at timestamptz,
    p_error jsonb) returns table (outcome text, job_id bigint, run_lease bigint)
  language plpgsql
  set jit = off
  as $$
declare
  w {{schema}}.waiting_jobs;
  s record;
  v_done text;
begin
  if p_action not in ('complete', 'fail', 'retry', 'cancel', 'resume') then
    raise exception 'unknown callback action %', p_action using errcode = '22023';
  end if;
  delete from {{schema}}.waiting_jobs wj where wj.token = p_token returning * into w;
  if found then
    v_done := {{schema}}.settle_waiting(w, p_action, p_payload, p_run_at, p_error);
    return query select 'settled'::text, w.job_id, w.run_lease;
    return;
  end if;
  -- An attempt still running (waiting inside its handler, or about to park): record the callback once, while
  -- the attempt is open.
  select a.batch_id into s
    from {{schema}}.attempt_state a
   where a.callback_token = p_token and a.callback_result is null;
  if not found then
    return query select 'rejected'::text, null::bigint, null::bigint;
    return;
  end if;
  -- Wait for a flush closing this receipt (settle_attempts() holds this lock to its commit): the attempt may have just
  -- parked, and then the parked job is settled here; a flush after this one sees the recorded callback.
  perform pg_advisory_xact_lock({{schema}}.lock_ns('receipt'), (s.batch_id % 2147483647)::int);
  delete from {{schema}}.waiting_jobs wj where wj.token = p_token returning * into w;
  if found then
    v_done := {{schema}}.settle_waiting(w, p_action, p_payload, p_run_at, p_error);
    return query select 'settled'::text, w.job_id, w.run_lease;
    return;
  end if;
  select a.job_id, a.run_lease, a.claim_slot, a.batch_id, a.idx into s
    from {{schema}}.attempt_state a
   where a.callback_token = p_token and a.callback_result is null
   for update;
  if found and not exists (
       select 1 from {{schema}}.closure_batches c
        where c.slot = {{schema}}.receipt_slot(s.claim_slot, s.batch_id) and c.batch_id = s.batch_id
          and c.idxs @> s.idx)
     and exists (select 1 from {{schema}}.claim_batches b
                  where b.slot = {{schema}}.receipt_slot(s.claim_slot, s.batch_id) and b.batch_id = s.batch_id) then
    update {{schema}}.attempt_state a
       set callback_result = jsonb_build_object('action', p_action, 'payload', p_payload, 'runAt', p_run_at,
                                                'error', p_error),
           callback_at = now(), updated_at = now()
     where a.job_id = s.job_id and a.run_lease = s.run_lease;
    perform pg_notify('awa:{{schema}}:callback', s.job_id || ':' || s.run_lease);
    return query select 'delivered'::text, s.job_id, s.run_lease;
    return;
  end if;
  return query select 'rejected'::text, null::bigint, null::bigint;
end
$$;

-- The callback recorded for an attempt waiting in its handler (null until one arrived).
create function {{schema}}.callback_result(p_job_id bigint, p_lease bigint) returns jsonb
  language sql stable
  as $$ select a.callback_result from {{schema}}.attempt_state a where a.job_id = p_job_id and a.run_lease = p_lease $$;

-- Callback timeouts, run by the maintenance leader: parked jobs whose callback did not come in time go the
-- normal way of a failed attempt (retry with backoff, or failed/DLQ once attempts are exhausted). A callback
-- arriving afterwards is rejected. Returns the jobs moved.
create function {{schema}}.expire_callbacks(p_limit int) returns table (job_id bigint, run_lease bigint, outcome text)
  language plpgsql
  set jit = off
  as $$
declare
  w {{schema}}.waiting_jobs;
  v_route text;
begin
  for w in
    delete from {{schema}}.waiting_jobs wj
     where wj.job_id in (select x.job_id from {{schema}}.waiting_jobs x
                          where x.timeout_at < now() order by x.timeout_at limit p_limit for update skip locked)
    returning *
  loop
    -- A timeout is a failed attempt: retried while attempts remain (failure_route()).
    v_route := {{schema}}.settle_waiting(w, 'retry', null, null,
      jsonb_build_object('attempt', w.attempt, 'at', now(), 'error', 'callback timed out', 'name', 'CallbackTimeout'));
    job_id := w.job_id;
    run_lease := w.run_lease;
    outcome := case v_route when 'retry' then 'retry' else 'fail' end;
    return next;
  end loop;
end
$$;

-- How long until the next parked job's callback times out, in ms (0 when one is due now), or null when no parked
-- job has a timeout. Read by the leader after each expiry pass so it can wake at that deadline; measured on the
-- server's clock, so a host whose clock is off does not fire early or late.
create function {{schema}}.next_callback_timeout_ms() returns bigint
  language sql stable
  as $$
    select greatest(0, ceil(extract(epoch from (x.timeout_at - clock_timestamp())) * 1000))::bigint
      from {{schema}}.waiting_jobs x where x.timeout_at is not null order by x.timeout_at limit 1
  $$;
