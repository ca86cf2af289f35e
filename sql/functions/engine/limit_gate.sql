-- Flow control's gate (docs/flow-control.md): jobs over their limits wait in deferred_jobs ('available',
-- gate_key) and a claim lets the oldest of keys with room through, by appending them to the queue's gate lane
-- and claiming it in the same transaction.

-- The queue's gate lane (shard -1): jobs let through the gate are appended there and claimed in the same
-- claim. Created on first use, like any lane (ensure_lanes()).
create function {{schema}}.gate_lane(p_queue text) returns {{schema}}.lanes
  language plpgsql
  as $$
declare
  v_lane {{schema}}.lanes;
begin
  select * into v_lane from {{schema}}.lanes l where l.queue = p_queue and l.shard = -1;
  if found then
    return v_lane;
  end if;
  perform pg_advisory_xact_lock({{schema}}.lock_ns('lanes'), hashtext(p_queue));
  select * into v_lane from {{schema}}.lanes l where l.queue = p_queue and l.shard = -1;
  if found then
    return v_lane;
  end if;
  v_lane := {{schema}}.create_lane(p_queue, 1::smallint, -1::smallint, false, md5(p_queue || ':gate'), 1::smallint);
  return v_lane;
end
$$;

-- Up to p_n keys with jobs waiting at a queue's gate, by a skip scan of limit_gate_hash: a probe per key, not
-- per job. They are read in the order of their hashes from a random point, wrapping round, so a claim looks at a
-- bounded number of waiting keys and, over claims, at each of them alike (however many keys wait, a claim's cost
-- follows its room).
create function {{schema}}.gate_keys(p_queue text, p_n int) returns table (key text)
  language plpgsql
  as $$
declare
  v_start int := (floor(random() * 4294967296) - 2147483648)::int;
begin
  return query
    with recursive keys as (
      (select hashtext(d.gate_key) as h, d.gate_key, 1 as n from {{schema}}.deferred_jobs d
        where d.state = 'available' and d.queue = p_queue and d.gate_key is not null
          and hashtext(d.gate_key) >= v_start
        order by hashtext(d.gate_key), d.gate_key limit 1)
      union all
      select x.h, x.gate_key, k.n + 1
        from keys k
        cross join lateral (select hashtext(d.gate_key) as h, d.gate_key from {{schema}}.deferred_jobs d
                             where d.state = 'available' and d.queue = p_queue and d.gate_key is not null
                               and (hashtext(d.gate_key), d.gate_key) > (k.h, k.gate_key)
                             order by hashtext(d.gate_key), d.gate_key limit 1) x
       where k.n < p_n
    ), wrapped as (
      (select hashtext(d.gate_key) as h, d.gate_key, (select count(*) from keys)::int + 1 as n
         from {{schema}}.deferred_jobs d
        where d.state = 'available' and d.queue = p_queue and d.gate_key is not null
          and hashtext(d.gate_key) < v_start
        order by hashtext(d.gate_key), d.gate_key limit 1)
      union all
      select x.h, x.gate_key, w.n + 1
        from wrapped w
        cross join lateral (select hashtext(d.gate_key) as h, d.gate_key from {{schema}}.deferred_jobs d
                             where d.state = 'available' and d.queue = p_queue and d.gate_key is not null
                               and (hashtext(d.gate_key), d.gate_key) > (w.h, w.gate_key)
                               and hashtext(d.gate_key) < v_start
                             order by hashtext(d.gate_key), d.gate_key limit 1) x
       where w.n < p_n
    )
    select k.gate_key from keys k
    union all
    select w.gate_key from wrapped w where w.n <= p_n;
end
$$;

-- Lets waiting jobs through the gate: the oldest of each waiting key with room (of the keys p_gate_keys that
-- gate_keys() gave this claim), oldest first overall, at most p_room. They are appended to the gate lane (one
-- reservation, one insert) and claimed there at once, and their starts recorded. Returns the receipt with its
-- members' keys and job ids. p_key_path: where a job's key is in its args (claim_limited()).
create function {{schema}}.admit_gated(p_queue text, p_limits jsonb, p_key_path text[], p_room int,
    p_gate_keys text[], p_hold_keys text[], p_hold_counts int[], p_instance text, p_deadline_secs int,
    p_now timestamptz)
  returns table (batch_id bigint, claim_slot smallint, n int, jobs json, keys text[], job_ids bigint[])
  language plpgsql
  as $$
declare
  v_cap int := (p_limits #>> '{perKey,concurrency}')::int;
  v_rate jsonb := p_limits #> '{perKey,rate}';
  v_moved {{schema}}.deferred_jobs[];
  v_lane {{schema}}.lanes;
  v_first bigint;
  v_slot smallint;
  v_set text;
  b record;
begin
  if cardinality(p_gate_keys) = 0 then
    return;
  end if;
  with picked as (
    select w.job_id
      from (select u.key as gate_key,
                   least(coalesce(v_cap - u.n, 2147483647),
                         case when v_rate is null then 2147483647
                              else {{schema}}.rate_room(p_queue, 'key', u.key, v_rate, p_now) end) as room
              from {{schema}}.slots_used(p_gate_keys, p_hold_keys, p_hold_counts) u) r
      cross join lateral (select d.job_id from {{schema}}.deferred_jobs d
                           where d.state = 'available' and d.queue = p_queue and d.gate_key = r.gate_key
                           order by d.job_id limit greatest(r.room, 0)) w
     order by w.job_id limit p_room
  ), moved as (
    delete from {{schema}}.deferred_jobs d using picked p where d.job_id = p.job_id returning d.*
  )
  select array_agg(m order by m.job_id) into v_moved from moved m;
  if v_moved is null then
    return;
  end if;
  v_lane := {{schema}}.gate_lane(p_queue);
  -- Reserved as a producer does (reserve_lane()): listed among the lane's producers first, so a claim that
  -- meets positions of a claim that rolled back knows they are dead. Only claims of this queue, which take
  -- turns under the limits lock, write here, so nobody draws between the two sequence calls.
  v_set := pg_current_xact_id()::text;
  v_set := pg_advisory_xact_lock_shared({{schema}}.lock_ns('producing'), v_lane.lane_id)::text;
  v_first := nextval(v_lane.enqueue_seq);
  if cardinality(v_moved) > 1 then
    v_set := setval(v_lane.enqueue_seq, v_first + cardinality(v_moved) - 1, true)::text;
  end if;
  select r.slot into v_slot from {{schema}}.ring_rotations r order by r.generation desc limit 1;
  insert into {{schema}}.ready_entries
    (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, attempt, max_attempts, run_lease,
     enqueued_at, ready_at, meta)
  select v_slot, v_lane.lane_id, v_first + u.ordinality - 1, u.job_id, u.kind, p_queue, u.priority, u.args, u.attempt,
         u.max_attempts, u.run_lease, u.enqueued_at, p_now, u.meta
    from unnest(v_moved) with ordinality as u;
  v_set := pg_advisory_xact_lock({{schema}}.lock_ns('claim'), v_lane.lane_id)::text;
  for b in select * from {{schema}}.claim_lane(v_lane, cardinality(v_moved), p_instance, p_deadline_secs,
                                               p_key_path) loop
    perform {{schema}}.record_starts(p_queue, p_limits, b.claim_slot, b.batch_id,
                                     array(select generate_series(1, b.n)), b.job_ids, b.leases, b.keys, p_now);
    batch_id := b.batch_id;
    claim_slot := b.claim_slot;
    n := b.n;
    jobs := b.jobs;
    keys := b.keys;
    job_ids := b.job_ids;
    return next;
  end loop;
end
$$;
