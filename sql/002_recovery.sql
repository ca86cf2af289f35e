-- Recovery: worker liveness, rescue of abandoned attempts, operator cancel, attempt progress and the
-- dead-letter queue.
--
-- Liveness is per process, not per job: a worker host refreshes one runtime_instances row per
-- heartbeat interval, and that vouches for every receipt it holds. A receipt is abandoned when its
-- instance has not been heard from within the staleness window, or when its batch deadline passed.

create table {{schema}}.runtime_instances (
  instance_id  text primary key,
  hostname     text not null,
  pid          int not null,
  queues       text[] not null,
  started_at   timestamptz not null default now(),
  heartbeat_at timestamptz not null default now(),
  stopped_at   timestamptz
) with (fillfactor = 50);

-- Mutable state of a live attempt, materialised only when the attempt asks for it (progress today).
-- Keyed by attempt; the receipt columns let cleanup find rows whose attempt has ended.
create table {{schema}}.attempt_state (
  job_id     bigint not null,
  run_lease  bigint not null,
  claim_slot smallint not null,
  batch_id   bigint not null,
  idx        int not null,
  progress   jsonb,
  updated_at timestamptz not null default now(),
  primary key (job_id, run_lease)
) with (fillfactor = 70);

-- Open receipts of the given batch: members with no closure yet, with what routing them needs.
create function {{schema}}.open_members(p_slot smallint, p_batch bigint)
  returns table (idx int, job_id bigint, run_lease bigint, attempt int, max_attempts int)
  language sql stable
  as $$
    select m.idx, r.job_id, m.run_lease, r.attempt + 1, r.max_attempts
      from {{schema}}.receipt_members(p_slot, p_batch) m
      join {{schema}}.ready_entries r on r.slot = m.ready_slot and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq
     where not exists (select 1 from {{schema}}.closure_batches c
                        where c.slot = p_slot and c.batch_id = p_batch and c.idxs @> m.idx)
  $$;

-- Retry delay used when the database itself routes an attempt (rescue): 2^attempt s + up to 25 %
-- jitter, capped at 24 h — the same rule as the runtime's retry policy.
create function {{schema}}.backoff(p_attempt int) returns interval
  language sql volatile
  as $$ select make_interval(secs => least(power(2, p_attempt), 86400) * (1 + 0.25 * random())) $$;

-- Rescue, run by the maintenance leader: closes the open receipts of batches whose worker went silent
-- (no heartbeat within p_staleness_secs, or stopped) or whose deadline passed, and routes each attempt
-- through the normal path with the attempt counted: retry with backoff, or failed (or DLQ) once
-- exhausted. Closing goes through finish(), so it is fenced exactly like a completion: a worker that
-- settles the same attempt first wins, and a later completion from the rescued worker is a no-op.
-- Each rescued attempt is announced on the cancel channel so its handler's signal fires if it is
-- still running somewhere. Returns the rescued attempts.
create function {{schema}}.rescue(p_staleness_secs int, p_max_batches int)
  returns table (job_id bigint, run_lease bigint, instance_id text, reason text, outcome text)
  language plpgsql
  as $$
declare
  b record;
  m record;
  v_slots smallint[];
  v_batches bigint[];
  v_idxs int[];
  v_ids bigint[];
  v_leases bigint[];
  v_outcomes text[];
  v_run_ats timestamptz[];
  v_errors jsonb[];
  v_err text;
begin
  for b in
    select cb.slot, cb.batch_id, cb.instance_id,
           case when cb.deadline_at < now() then 'deadline_exceeded' else 'worker_lost' end as why
      from {{schema}}.claim_batches cb
      left join {{schema}}.runtime_instances ri on ri.instance_id = cb.instance_id
     where (cb.deadline_at < now()
            or ri.instance_id is null
            or ri.stopped_at is not null
            or ri.heartbeat_at < now() - make_interval(secs => p_staleness_secs))
       and cb.size > (select coalesce(sum(c.n), 0) from {{schema}}.closure_batches c
                       where c.slot = cb.slot and c.batch_id = cb.batch_id)
     order by cb.claimed_at
     limit p_max_batches
  loop
    v_err := case when b.why = 'deadline_exceeded' then 'rescued: deadline exceeded'
                  else format('rescued: worker %s stopped heartbeating', b.instance_id) end;
    select array_agg(b.slot), array_agg(b.batch_id), array_agg(o.idx), array_agg(o.job_id), array_agg(o.run_lease),
           array_agg(case when o.attempt >= o.max_attempts then 'failed' else 'retry' end),
           array_agg(now() + {{schema}}.backoff(o.attempt)),
           array_agg(jsonb_build_object('attempt', o.attempt, 'at', now(), 'error', v_err, 'name', 'Rescued'))
      into v_slots, v_batches, v_idxs, v_ids, v_leases, v_outcomes, v_run_ats, v_errors
      from {{schema}}.open_members(b.slot, b.batch_id) o;
    continue when v_ids is null;
    for m in
      select f.job_id, u.lease, u.outcome
        from {{schema}}.finish(v_slots, v_batches, v_idxs, v_ids, v_leases, v_outcomes, v_run_ats, v_errors) f
        join unnest(v_ids, v_leases, v_outcomes) u(id, lease, outcome) on u.id = f.job_id
    loop
      perform pg_notify('awa:{{schema}}:cancel', m.job_id || ':' || m.lease);
      job_id := m.job_id;
      run_lease := m.lease;
      instance_id := b.instance_id;
      reason := b.why;
      outcome := m.outcome;
      return next;
    end loop;
  end loop;
end
$$;

-- Operator cancel of one job, wherever it is. Scheduled/retryable: removed from the backlog. Waiting in
-- the ring: tombstoned under the lane's claim lock, so no claimer can take it meanwhile. Running: its
-- receipt is closed through the fenced path and the owner is told to abort the handler. Returns the
-- state the job was in, or null when it had already finished (or never existed).
create function {{schema}}.cancel_job(p_job_id bigint, p_reason text) returns text
  language plpgsql
  as $$
declare
  d {{schema}}.deferred_jobs;
  r {{schema}}.ready_entries;
  l {{schema}}.lanes;
  b record;
  v_err jsonb;
begin
  delete from {{schema}}.deferred_jobs dj where dj.job_id = p_job_id returning * into d;
  if found then
    insert into {{schema}}.done_entries
      (job_id, run_lease, state, kind, queue, priority, args, attempt, max_attempts, enqueued_at, meta)
    values (d.job_id, d.run_lease, 'cancelled', d.kind, d.queue, d.priority, d.args, d.attempt, d.max_attempts,
            d.enqueued_at, {{schema}}.with_error(d.meta, jsonb_build_object('attempt', d.attempt, 'at', now(), 'error', p_reason)));
    return d.state;
  end if;
  select * into r from {{schema}}.ready_entries re where re.job_id = p_job_id order by re.run_lease desc limit 1;
  if not found or exists (select 1 from {{schema}}.done_entries de where de.job_id = p_job_id and de.run_lease >= r.run_lease) then
    return null;
  end if;
  select * into l from {{schema}}.lanes where lane_id = r.lane_id;
  perform pg_advisory_xact_lock({{schema}}.lock_ns('claim'), l.lane_id);
  v_err := jsonb_build_object('attempt', r.attempt + 1, 'at', now(), 'error', p_reason);
  if r.lane_seq > {{schema}}.claimed_through(l) then
    insert into {{schema}}.ready_tombstones (slot, lane_id, lane_seq, job_id, reason)
      values (r.slot, r.lane_id, r.lane_seq, r.job_id, p_reason) on conflict do nothing;
    if not found then
      return null;
    end if;
    insert into {{schema}}.done_entries
      (job_id, run_lease, state, kind, queue, priority, args, attempt, max_attempts, enqueued_at, meta)
    values (r.job_id, r.run_lease, 'cancelled', r.kind, r.queue, r.priority, r.args, r.attempt, r.max_attempts,
            r.enqueued_at, {{schema}}.with_error(r.meta, v_err));
    return 'available';
  end if;
  select cb.slot, cb.batch_id, m.idx, m.run_lease into b
    from {{schema}}.claim_batches cb
    cross join lateral {{schema}}.receipt_members(cb.slot, cb.batch_id) m
   where cb.lane_id = r.lane_id and cb.first_seq <= r.lane_seq and cb.last_seq >= r.lane_seq
     and m.lane_seq = r.lane_seq and m.run_lease = r.run_lease + 1;
  if not found then
    return null;
  end if;
  perform 1 from {{schema}}.finish(array[b.slot], array[b.batch_id], array[b.idx], array[p_job_id], array[b.run_lease],
                                   array['cancelled'], array[null::timestamptz], array[v_err]);
  if not found then
    return null;
  end if;
  perform pg_notify('awa:{{schema}}:cancel', p_job_id || ':' || b.run_lease);
  return 'running';
end
$$;

-- Progress of a live attempt, written only while its receipt is open (the fence).
create function {{schema}}.set_progress(p_slot smallint, p_batch bigint, p_idx int, p_job_id bigint, p_lease bigint,
    p_progress jsonb) returns boolean
  language plpgsql
  as $$
begin
  if not exists (select 1 from {{schema}}.receipt_members(p_slot, p_batch) m where m.idx = p_idx and m.run_lease = p_lease)
     or exists (select 1 from {{schema}}.closure_batches c where c.slot = p_slot and c.batch_id = p_batch and c.idxs @> p_idx) then
    return false;
  end if;
  insert into {{schema}}.attempt_state (job_id, run_lease, claim_slot, batch_id, idx, progress)
    values (p_job_id, p_lease, p_slot, p_batch, p_idx, p_progress)
    on conflict (job_id, run_lease) do update set progress = excluded.progress, updated_at = now();
  return true;
end
$$;

-- Moves DLQ entries back into the ready ring with a fresh attempt counter (the run lease keeps rising,
-- so fencing stays monotonic). Returns the ids moved.
create function {{schema}}.dlq_retry(p_job_ids bigint[]) returns setof bigint
  language plpgsql
  as $$
declare
  g record;
  v record;
begin
  for g in
    with moved as (
      delete from {{schema}}.dlq_entries e where e.job_id = any(p_job_ids) returning e.*
    )
    select moved.queue, moved.priority, array_agg(row(moved.*)::{{schema}}.dlq_entries order by moved.job_id) as rows
      from moved group by moved.queue, moved.priority order by moved.queue, moved.priority
  loop
    select * into v from {{schema}}.reserve_lane(g.queue, g.priority, 0::smallint, cardinality(g.rows));
    insert into {{schema}}.ready_entries
      (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, enqueued_at, meta)
    select v.slot, v.lane_id, v.first_seq + u.o - 1, u.job_id, u.kind, u.queue, u.priority, u.args, 0, u.max_attempts,
           u.run_lease, u.enqueued_at, u.meta
      from unnest(g.rows::{{schema}}.dlq_entries[]) with ordinality as u(job_id, run_lease, kind, queue, priority, args,
             attempt, max_attempts, enqueued_at, dlq_at, reason, meta, o);
    return query select x.job_id from unnest(g.rows::{{schema}}.dlq_entries[]) x;
  end loop;
end
$$;

-- History retention and housekeeping, run by the leader: off the claim/complete loop, bounded per call.
create function {{schema}}.cleanup(p_failed_retention_secs int, p_dlq_retention_secs int, p_limit int)
  returns table (failed bigint, dlq bigint, attempt_states bigint, instances bigint)
  language plpgsql
  as $$
begin
  with gone as (
    delete from {{schema}}.done_entries d where (d.job_id, d.run_lease) in (
      select x.job_id, x.run_lease from {{schema}}.done_entries x
       where x.finished_at < now() - make_interval(secs => p_failed_retention_secs) limit p_limit)
    returning 1)
  select count(*) into failed from gone;
  with gone as (
    delete from {{schema}}.dlq_entries d where d.job_id in (
      select x.job_id from {{schema}}.dlq_entries x
       where x.dlq_at < now() - make_interval(secs => p_dlq_retention_secs) limit p_limit)
    returning 1)
  select count(*) into dlq from gone;
  -- Attempt state of attempts that ended (closed receipt, or receipt already pruned).
  with gone as (
    delete from {{schema}}.attempt_state s where (s.job_id, s.run_lease) in (
      select x.job_id, x.run_lease from {{schema}}.attempt_state x
       where not exists (select 1 from {{schema}}.claim_batches cb where cb.slot = x.claim_slot and cb.batch_id = x.batch_id)
          or exists (select 1 from {{schema}}.closure_batches c
                      where c.slot = x.claim_slot and c.batch_id = x.batch_id and c.idxs @> x.idx)
       limit p_limit)
    returning 1)
  select count(*) into attempt_states from gone;
  with gone as (
    delete from {{schema}}.runtime_instances ri
     where ri.heartbeat_at < now() - interval '1 day'
       and not exists (select 1 from {{schema}}.claim_batches cb where cb.instance_id = ri.instance_id)
    returning 1)
  select count(*) into instances from gone;
  return next;
end
$$;

-- The engine's statements touch every partition of a ring table, so on tables without statistics the
-- planner's cost estimates can cross jit_above_cost; JIT compilation then costs ~1 s per call (seen on
-- PostgreSQL 15 for rescue()) to run a query that takes milliseconds. None of these queries benefit.
do $nojit$
declare
  f text;
begin
  foreach f in array array[
    'claim(text, integer, text, integer, integer)',
    'finish(smallint[], bigint[], integer[], bigint[], bigint[], text[], timestamp with time zone[], jsonb[])',
    'rescue(integer, integer)', 'prune(integer, integer)', 'rotate()', 'promote_due(integer)',
    'slot_pinned_by(smallint, integer)', 'queue_counts()', 'cancel_job(bigint, text)',
    'cleanup(integer, integer, integer)', 'set_progress(smallint, bigint, integer, bigint, bigint, jsonb)',
    'dlq_retry(bigint[])', 'claimed_through({{schema}}.lanes)'
  ] loop
    execute format('alter function {{schema}}.%s set jit = off', f);
  end loop;
end
$nojit$;
