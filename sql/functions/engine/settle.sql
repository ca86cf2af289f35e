-- Settling attempts: one call per settle flush (and per rescue or cancel). Each input row names a
-- receipt member (claim slot, batch, member index) and the run lease it was claimed with. A row is accepted
-- only if that receipt is still open for that member at that run lease (the fence); anything else is a stale
-- writer and is silently ignored. Returns the job ids that were accepted.
--   completed  -> closure only (compact success history)
--   retry      -> closure + deferred_jobs(retryable, attempt counted); run_at null = the backoff rule; on the
--                 last attempt, as failed (failure_route())
--   snooze     -> closure + deferred_jobs(scheduled, attempt not counted)
--   failed / cancelled -> closure + done_entries, or dlq_entries for failures of DLQ-enabled queues
--   wait       -> closure + waiting_jobs: parked until the callback the attempt registered (callbacks.sql),
--                 or settled at once by a callback that reached the attempt before it parked
-- A generic plan: for the one- or two-result flushes of a quiet queue PostgreSQL kept choosing a custom plan,
-- planned again on every call over all the partitioned tables this statement touches (3.2 ms a call against
-- 0.9 ms with the generic plan, one result per flush, one connection; from 16 results on they cost the same).
-- The statement is written to plan well without the parameters' values.
--
-- Plain completions (no error, no run time) may instead come as groups: one row per (receipt, run lease) with
-- the member indexes as a multirange (p_g*), the common case of a drain. A group is checked and closed as a
-- whole (its members minus those already closed, where the receipt's lease matches), so its cost does not
-- grow with its size. Rows come back per accepted result (job_id) or per accepted group (group_batch and the
-- accepted group_idxs).
--
-- A completion that carries a result (what its handler returned) is still a plain completion, closed with its
-- group; its result comes beside the groups, keyed by receipt and member (p_rbatches, p_ridxs, with its job id),
-- the results themselves as one JSON array in the same order (p_results: one parse, where a jsonb[] would be an
-- array literal to unescape and then a parse per element). Those of members the group closed are written to
-- job_results in the same statement as the closure. Settling completions with results as rows instead, each
-- fenced on its own, cost twice the server CPU per job of the groups (bench drain --results). A flush without
-- results passes none and writes nothing there. Every job ended here is handed to jobs_ended() or
-- group_completed() (ended.sql), which wake the producers waiting for it and resolve the flows' edges on it: two
-- probes of empty indexes when nobody waits.
create function {{schema}}.settle_attempts(p_slots smallint[], p_batches bigint[], p_idxs int[], p_job_ids bigint[],
    p_leases bigint[], p_outcomes text[], p_run_ats timestamptz[], p_errors jsonb[],
    p_gslots smallint[] default null, p_gbatches bigint[] default null, p_gleases bigint[] default null,
    p_gidxs int4multirange[] default null, p_rbatches bigint[] default null, p_ridxs int[] default null,
    p_rjob_ids bigint[] default null, p_results jsonb default null)
  returns table (job_id bigint, group_batch bigint, group_idxs int4multirange)
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  as $$
declare
  v_early record;
  v_route text;
  v_accepted bigint[];
  v_completed bigint[];
  v_settled {{schema}}.settled_job[];
begin
  -- Serialises closers of the same receipt batch (completion vs rescue vs cancel); sorted, so two
  -- flushes that share batches cannot deadlock.
  perform pg_advisory_xact_lock({{schema}}.lock_ns('receipt'), (x.b % 2147483647)::int)
    from (select distinct b from unnest(p_batches || coalesce(p_gbatches, '{}')) as b order by 1) x;
  if coalesce(cardinality(p_gbatches), 0) > 0 then
    -- One statement: where each receipt lives (receipt_slot()) must be read by the statement that locks the
    -- ring partitions, after any wait for a prune that is carrying the receipt forward. Split into a slot
    -- lookup and a statement per slot (which let the plan open one partition), it rejected valid completions
    -- that arrived mid-carry (settle-during-carry.test.ts).
    return query
    with input as (
      select u.batch_id, u.run_lease, u.idxs, {{schema}}.receipt_slot(u.given_slot, u.batch_id) as slot
        from unnest(p_gslots, p_gbatches, p_gleases, p_gidxs) as u(given_slot, batch_id, run_lease, idxs)
    ), open as materialized (
      -- The members asked for, within the receipt, claimed at that run lease, and not closed yet.
      select i.slot, i.batch_id, b.lane_id,
             i.idxs * int4multirange(int4range(1, b.size + 1))
               * case when b.lease = i.run_lease then '{(,)}'::int4multirange
                      when b.lease is not null then '{}'::int4multirange
                      else coalesce((select range_agg(int4range(k, k + 1)) from generate_subscripts(b.run_leases, 1) k
                                      where b.run_leases[k] = i.run_lease), '{}') end
               - {{schema}}.receipt_closed(i.slot, i.batch_id) as idxs
        from input i
        join {{schema}}.claim_batches b on b.slot = i.slot and b.batch_id = i.batch_id
    ), closure as (
      insert into {{schema}}.closure_batches (slot, batch_id, idxs, n, outcome)
      select o.slot, o.batch_id, o.idxs, (select sum(upper(r) - lower(r)) from unnest(o.idxs) r), 'completed'
        from open o where not isempty(o.idxs)
    ), stored as (
      -- The results of the members closed here. A job completes once; one retried from the DLQ that completes
      -- again replaces its result.
      insert into {{schema}}.job_results (job_id, queue, completed_at, result)
      select distinct on (r.job_id) r.job_id, l.queue, now(), r.result
        from rows from (unnest(p_rbatches), unnest(p_ridxs), unnest(p_rjob_ids), jsonb_array_elements(p_results))
               as r(batch_id, idx, job_id, result)
        join open o on o.batch_id = r.batch_id and o.idxs @> r.idx
        join {{schema}}.lanes l on l.lane_id = o.lane_id
       where p_results is not null
      on conflict on constraint job_results_pkey do update
        set queue = excluded.queue, completed_at = excluded.completed_at, result = excluded.result
    )
    select null::bigint, o.batch_id, o.idxs from open o where not isempty(o.idxs);
    perform {{schema}}.group_completed(p_gslots, p_gbatches, p_gidxs);
  end if;
  if coalesce(cardinality(p_batches), 0) = 0 then
    return;
  end if;
  with input as (
    -- Where each receipt lives now, as receipt_slot() says, but as one join: a flush may carry 512 rows.
    select u.*, coalesce(f.slot, u.given_slot) as slot
      from unnest(p_slots, p_batches, p_idxs, p_job_ids, p_leases, p_outcomes, p_run_ats, p_errors)
        as u(given_slot, batch_id, idx, job_id, run_lease, outcome, run_at, error)
      left join {{schema}}.receipt_forwards f on f.batch_id = u.batch_id
  ), batches as materialized (
    -- The receipts of this call and their settled members, each read once per receipt (a flush names a
    -- handful): a probe per result would visit every ring partition once per job (the slot is known only
    -- at run time), which made this call the drain's bottleneck.
    select b.* from (select distinct slot, batch_id from input) k
      join {{schema}}.claim_batches b on b.slot = k.slot and b.batch_id = k.batch_id
  ), closed as materialized (
    select k.slot, k.batch_id, {{schema}}.receipt_closed(k.slot, k.batch_id) as idxs
      from (select distinct slot, batch_id from input) k
  ), valid as (
    -- Member idx of a batch: arithmetic on the lane range in the common case; the stored arrays only
    -- when the claim recorded them.
    select distinct on (i.slot, i.batch_id, i.idx) i.given_slot, i.slot, i.batch_id, i.idx, i.job_id, i.run_lease,
           -- Parking needs the callback the attempt registered; without one it can only be retried.
           case when i.outcome = 'wait' and not exists (
                  select 1 from {{schema}}.attempt_state s
                   where s.job_id = i.job_id and s.run_lease = i.run_lease and s.callback_token is not null)
                then 'retry' else i.outcome end as outcome,
           i.run_at, i.error, b.ready_slot, b.lane_id,
           case when b.lane_seqs is null then b.first_seq + i.idx - 1 else b.lane_seqs[i.idx] end as lane_seq
      from input i
      join batches b on b.slot = i.slot and b.batch_id = i.batch_id
      left join closed x on x.slot = i.slot and x.batch_id = i.batch_id
     where i.idx between 1 and b.size
       and coalesce(b.lease, b.run_leases[i.idx]) = i.run_lease
       and not coalesce(x.idxs @> i.idx, false)
  ), closure as (
    insert into {{schema}}.closure_batches (slot, batch_id, idxs, n, outcome)
    select v.slot, v.batch_id, range_agg(int4range(v.idx, v.idx + 1)), count(*),
           case when v.outcome = 'completed' then 'completed' else 'settled' end
      from valid v
     group by v.slot, v.batch_id, v.outcome = 'completed'
  ), body as (
    -- Where each goes: failure_route(), the rule every settling path shares (a retry on the last attempt is a
    -- failure, a failure goes to the DLQ on a queue with the DLQ on); place_settled() writes it there, the
    -- writer settle_waiting() shares (a parked attempt is the one route only this function writes).
    select v.*, r.kind, r.queue, r.priority, r.args, r.attempt as prior_attempt, r.max_attempts,
           r.enqueued_at, r.meta,
           {{schema}}.failure_route(r.queue, v.outcome, r.attempt + 1, r.max_attempts) as route
      from valid v
      join {{schema}}.ready_entries r
        on r.slot = v.ready_slot and r.lane_id = v.lane_id and r.lane_seq = v.lane_seq
     where v.outcome <> 'completed'
  ), to_waiting as (
    insert into {{schema}}.waiting_jobs
      (job_id, run_lease, kind, queue, priority, args, attempt, max_attempts, enqueued_at, meta, token, timeout_at)
    select b.job_id, b.run_lease, b.kind, b.queue, b.priority, b.args, b.prior_attempt + 1, b.max_attempts,
           b.enqueued_at, b.meta, s.callback_token, s.callback_timeout_at
      from body b
      join {{schema}}.attempt_state s on s.job_id = b.job_id and s.run_lease = b.run_lease
     where b.outcome = 'wait'
  )
  select array_agg(v.job_id), array_agg(v.job_id) filter (where v.outcome = 'completed'),
         (select array_agg(row(b.job_id, b.run_lease, b.kind, b.queue, b.priority, b.args, b.prior_attempt + 1,
                               b.max_attempts, b.enqueued_at, {{schema}}.with_error(b.meta, b.error), b.route,
                               case when b.route in ('retry', 'snooze')
                                    then coalesce(b.run_at, now() + {{schema}}.backoff(b.prior_attempt + 1)) end,
                               b.error ->> 'error')::{{schema}}.settled_job)
            from body b where b.route <> 'wait')
    into v_accepted, v_completed, v_settled
    from valid v;
  if v_settled is not null then
    perform {{schema}}.place_settled(v_settled);
  end if;
  -- Their failures reached place_settled() above, which tells those who wait on them.
  perform {{schema}}.jobs_ended(v_completed, array_fill('completed'::text, array[coalesce(cardinality(v_completed), 0)]));
  return query select a, null::bigint, null::int4multirange from unnest(v_accepted) a;
  -- A callback can reach an attempt before its 'wait' is flushed (the outside service answered at once): it was
  -- recorded on the open attempt, so the job is settled now as it says instead of parking with a used token.
  -- resolve_callback() takes this receipt lock, so it either committed before this flush (seen here) or runs
  -- after it and finds the parked job.
  if 'wait' = any(p_outcomes) then
    for v_early in
      delete from {{schema}}.waiting_jobs wj
       using {{schema}}.attempt_state s
       where wj.job_id = any(p_job_ids) and s.job_id = wj.job_id and s.run_lease = wj.run_lease
         and s.callback_result is not null
      returning wj as w, s.callback_result as cb
    loop
      v_route := {{schema}}.settle_waiting(v_early.w, v_early.cb ->> 'action', v_early.cb -> 'payload',
        (v_early.cb ->> 'runAt')::timestamptz,
        case when jsonb_typeof(v_early.cb -> 'error') = 'object' then v_early.cb -> 'error' end);
    end loop;
  end if;
end
$$;
