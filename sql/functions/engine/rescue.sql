-- Rescue, run by the maintenance leader: closes the open members of receipts whose worker went silent (no
-- heartbeat within p_staleness_secs, stopped, or unknown) or whose deadline passed, and routes each attempt
-- through the normal path with the attempt counted: retry with the backoff rule, or failed (or DLQ) once
-- exhausted. Closing goes through settle_attempts(), so it is fenced exactly like a completion: a worker that settles
-- the same attempt first wins, and a later completion from the rescued worker is a no-op. Each rescued
-- attempt is announced on the cancel channel so its handler's signal fires if it still runs somewhere.
create function {{schema}}.rescue(p_staleness_secs int, p_max_batches int)
  returns table (job_id bigint, run_lease bigint, instance_id text, reason text, outcome text)
  language plpgsql
  set jit = off
  as $$
declare
  b record;
begin
  -- The receipts due first (materialized), their closures counted after, by a subquery of this statement: as a
  -- filter of the scan, every receipt in the ring had its closures summed on every tick, each through a call of a
  -- SQL function (not inlined: its body has a subquery) that cost more than the sum.
  for b in
    with due as materialized (
      select cb.slot, cb.batch_id, cb.instance_id, cb.size, cb.claimed_at, cb.deadline_at < now() as late
        from {{schema}}.claim_batches cb
        left join {{schema}}.runtime_instances ri on ri.instance_id = cb.instance_id
       where cb.deadline_at < now()
          or ri.instance_id is null
          or ri.stopped_at is not null
          or ri.heartbeat_at < now() - make_interval(secs => p_staleness_secs)
    )
    select d.slot, d.batch_id, d.instance_id,
           case when d.late then 'deadline_exceeded' else 'worker_lost' end as why
      from due d
     where d.size > coalesce((select sum(c.n) from {{schema}}.closure_batches c
                               where c.slot = d.slot and c.batch_id = d.batch_id), 0)
     order by d.claimed_at
     limit p_max_batches
  loop
    return query
      select s.job_id, s.run_lease, b.instance_id, b.why, s.outcome
        from {{schema}}.settle_open_members(b.slot, b.batch_id,
               case when b.why = 'deadline_exceeded' then 'rescued: deadline exceeded'
                    else format('rescued: worker %s stopped heartbeating', b.instance_id) end,
               'Rescued', true) s;
  end loop;
end
$$;

-- Closes every open member of one receipt through settle_attempts(): with p_count_attempt, as a failed attempt (retry
-- with backoff, or failed/DLQ once exhausted); without, as a snooze that runs again at once and spends no
-- attempt (the handler never ran). Announces each on the cancel channel. Returns what was settled.
create function {{schema}}.settle_open_members(p_slot smallint, p_batch bigint, p_error text, p_name text,
    p_count_attempt boolean)
  returns table (job_id bigint, run_lease bigint, outcome text)
  language plpgsql
  as $$
declare
  v record;
  m record;
begin
  select array_agg(p_slot) as slots, array_agg(p_batch) as batches, array_agg(o.idx) as idxs,
         array_agg(o.job_id) as ids, array_agg(o.run_lease) as leases,
         array_agg(case when not p_count_attempt then 'snooze'
                        when o.attempt >= o.max_attempts then 'failed' else 'retry' end) as outcomes,
         array_agg(case when p_count_attempt then null::timestamptz else now() end) as run_ats,
         array_agg(jsonb_build_object('attempt', o.attempt, 'at', now(), 'error', p_error, 'name', p_name)) as errors
    into v
    from {{schema}}.open_members(p_slot, p_batch) o;
  if v.ids is null then
    return;
  end if;
  for m in
    select f.job_id, u.lease, u.outcome
      from {{schema}}.settle_attempts(v.slots, v.batches, v.idxs, v.ids, v.leases, v.outcomes, v.run_ats, v.errors) f
      join unnest(v.ids, v.leases, v.outcomes) u(id, lease, outcome) on u.id = f.job_id
  loop
    perform pg_notify('awa:{{schema}}:cancel', m.job_id || ':' || m.lease);
    job_id := m.job_id;
    run_lease := m.lease;
    outcome := m.outcome;
    return next;
  end loop;
end
$$;

-- A host that lost the answer to a claim (the connection dropped after the claim committed) holds receipts
-- it does not know of; nobody else would rescue them while the host heartbeats. The host calls this with the
-- receipts it does know of: every other open receipt of this instance and queue claimed more than
-- p_older_than_secs ago is handed back (snoozed, attempt not spent: its handler never ran).
create function {{schema}}.release_unknown_receipts(p_instance text, p_queue text, p_known bigint[],
    p_older_than_secs int)
  returns table (job_id bigint, run_lease bigint)
  language plpgsql
  set jit = off
  as $$
declare
  b record;
begin
  -- Most of an instance's receipts in the ring are settled ones it has forgotten: each has its closures summed
  -- by a subquery of this statement, not a function call per receipt (see rescue()).
  for b in
    select cb.slot, cb.batch_id
      from {{schema}}.claim_batches cb
      join {{schema}}.lanes l on l.lane_id = cb.lane_id
     where cb.instance_id = p_instance and l.queue = p_queue
       and cb.batch_id not in (select unnest(p_known))  -- hashed: "<> all" compares with every known one
       and cb.claimed_at < now() - make_interval(secs => p_older_than_secs)
       and cb.size > coalesce((select sum(c.n) from {{schema}}.closure_batches c
                                where c.slot = cb.slot and c.batch_id = cb.batch_id), 0)
  loop
    return query
      select s.job_id, s.run_lease
        from {{schema}}.settle_open_members(b.slot, b.batch_id, 'claim answer lost: handed back', 'ClaimLost', false) s;
  end loop;
end
$$;
