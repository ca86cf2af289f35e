-- Flow control (docs/flow-control.md): how the claim of a limited queue decides which jobs start. Every claim
-- of a limited queue runs under the queue's 'limits' lock, so the fleet's claims of it take turns and each one
-- sees every start and hold the previous ones wrote: the limits hold across hosts because they are decided in
-- one place, the database, one claim at a time.
--   per key:    at most perKey.concurrency attempts hold a slot of the key; at most perKey.rate starts;
--   per queue:  at most queue.concurrency attempts hold a slot of the queue; at most queue.rate starts.
-- A rate is a sliding window, exact: at most `limit` starts in any window of `periodMs`, and at most `burst` in
-- any window of periodMs * burst / limit (bursts bounded, smooth when burst is small).
-- A job's key: meta.limitKey (given at enqueue), else the args field limits.key.arg names (a dotted path), else ''.
-- A claim first lets waiting jobs through the gate (oldest first per key, keys that have room), then takes
-- fresh rows from the lanes as any claim does and keeps those whose key has room and no job waiting at the
-- gate; the rest are closed at once and wait at the gate (deferred_jobs 'available', gate_key) until their key
-- has room. So a job over its limit is moved once, never claimed and snoozed in a loop.

-- Effective limits: the declared ones, field by field under the operator's override (a null there removes
-- the field, a null section the section). Null when nothing is limited (a key alone limits nothing).
create function {{schema}}.limits_section(p_declared jsonb, p_override jsonb) returns jsonb
  language sql immutable
  as $$
    select case when jsonb_typeof(p_override) = 'null' then null
                else nullif(jsonb_strip_nulls(
                       coalesce(case when jsonb_typeof(p_declared) = 'object' then p_declared end, '{}')
                       || coalesce(case when jsonb_typeof(p_override) = 'object' then p_override end, '{}')), '{}')
           end
  $$;

create function {{schema}}.effective_limits(p_declared jsonb, p_override jsonb) returns jsonb
  language plpgsql immutable
  as $$
begin
  return (
    select case when l ? 'perKey' or l ? 'queue' then l end
      from (select jsonb_strip_nulls(jsonb_build_object(
                     'key', {{schema}}.limits_section(p_declared -> 'key', p_override -> 'key'),
                     'perKey', {{schema}}.limits_section(p_declared -> 'perKey', p_override -> 'perKey'),
                     'queue', {{schema}}.limits_section(p_declared -> 'queue', p_override -> 'queue'))) as l) x);
end
$$;

-- How many more starts a rate allows at p_now (no bound without a rate): its window's rows of the log, read
-- through the index (at most `limit` starts, so a bounded number of rows). Rows logged after p_now (a claim that
-- took the lock first though its transaction began later) count too.
create function {{schema}}.rate_room(p_queue text, p_scope text, p_key text, p_rate jsonb, p_now timestamptz)
  returns int
  language plpgsql stable
  as $$
declare
  v_limit int;
  v_burst int;
  v_period interval;
  v_in_period bigint;
  v_in_burst bigint;
begin
  if p_rate is null then
    return 2147483647;
  end if;
  v_limit := (p_rate ->> 'limit')::int;
  v_burst := coalesce((p_rate ->> 'burst')::int, v_limit);
  v_period := coalesce((p_rate ->> 'periodMs')::float8, 1000) * interval '1 millisecond';
  select coalesce(sum(s.n), 0), coalesce(sum(s.n) filter (where s.at > p_now - v_period * v_burst / v_limit), 0)
    into v_in_period, v_in_burst
    from {{schema}}.limit_starts s
   where s.queue = p_queue and s.scope = p_scope and s.key = p_key and s.at > p_now - v_period;
  return greatest(0, least(v_limit - v_in_period, v_burst - v_in_burst))::int;
end
$$;

-- When a rate allows a start again, if nothing else starts meanwhile: once the start that filled a window
-- leaves it (walking the window's rows newest first, the row at which their starts reach the limit).
create function {{schema}}.rate_opens(p_queue text, p_scope text, p_key text, p_rate jsonb, p_now timestamptz)
  returns timestamptz
  language plpgsql stable
  as $$
declare
  v_limit int := (p_rate ->> 'limit')::int;
  v_burst int := coalesce((p_rate ->> 'burst')::int, v_limit);
  v_period interval := coalesce((p_rate ->> 'periodMs')::float8, 1000) * interval '1 millisecond';
  v_full timestamptz;
  v_full_burst timestamptz;
begin
  select max(w.at) filter (where w.total >= v_limit), max(w.at) filter (where w.total >= v_burst)
    into v_full, v_full_burst
    from (select s.at, sum(s.n) over (order by s.at desc rows unbounded preceding) as total
            from {{schema}}.limit_starts s
           where s.queue = p_queue and s.scope = p_scope and s.key = p_key and s.at > p_now - v_period) w;
  return greatest(p_now, v_full + v_period, v_full_burst + v_period * v_burst / v_limit);
end
$$;

-- The receipts the hold rows p_rows name, each with its members as the row lists them, whether the receipt is
-- still in the ring (a receipt is gone only once all its members closed) and which of its members closed.
-- Set-based: every receipt is looked for and its closures read in one statement (a function call per receipt
-- locks every partition of the ring's tables each time it runs: 500 rows took 100 ms). It names only the tables
-- it needs: a statement locks every partition (and index) of each partitioned table it names, each time it runs.
create function {{schema}}.hold_receipts(p_rows {{schema}}.limit_holds[])
  returns table (batch_id bigint, idxs int[], job_ids bigint[], run_leases bigint[], keys text[], present boolean,
                 closed int4multirange)
  language plpgsql stable
  as $$
begin
  -- PL/pgSQL, not SQL: an inlined function's subqueries would run again for every member its caller unnests.
  return query
    select r.batch_id, r.idxs, r.job_ids, r.run_leases, r.keys,
           exists (select 1 from {{schema}}.claim_batches c where c.slot = r.slot and c.batch_id = r.batch_id),
           coalesce((select range_agg(m) from {{schema}}.closure_batches c cross join lateral unnest(c.idxs) m
                      where c.slot = r.slot and c.batch_id = r.batch_id), '{}')
      from (select h.batch_id, h.idxs, h.job_ids, h.run_leases, h.keys, coalesce(f.slot, h.slot) as slot
              from unnest(p_rows) h
              left join {{schema}}.receipt_forwards f on f.batch_id = h.batch_id) r;
end
$$;

-- The members of the hold rows p_rows that hold a slot now, one row each: its receipt member is still open
-- (`running`), or, for a strict FIFO key, its job will run again: it waits in the backlog to retry, or at the
-- gate (`parked`: that job's own slot, which it takes again when it runs), or a later row of it waits in a lane
-- (promoted, not claimed yet, not cancelled). For a strict FIFO key, a few probes per member that closed.
create function {{schema}}.held_in(p_rows {{schema}}.limit_holds[], p_fifo boolean)
  returns table (batch_id bigint, job_id bigint, key text, running boolean, parked boolean)
  language plpgsql stable
  as $$
begin
  if coalesce(cardinality(p_rows), 0) = 0 then
    return;
  end if;
  if not p_fifo then
    return query select r.batch_id, u.job_id, u.key, true, false
                   from {{schema}}.hold_receipts(p_rows) r
                   cross join lateral unnest(r.idxs, r.job_ids, r.keys) u(idx, job_id, key)
                  where r.present and not r.closed @> u.idx;
    return;
  end if;
  -- Strict FIFO: a member that closed still holds while its job will run again. Only the job's newest start
  -- among the holds counts (an earlier start, kept in a row another member still holds, is not its slot any
  -- more); a job's holds all carry its key, so they are all read here.
  return query
    with m as materialized (
      select r.batch_id as b, u.job_id as j, u.lease, u.key as k, r.present and not r.closed @> u.idx as open
        from {{schema}}.hold_receipts(p_rows) r
        cross join lateral unnest(r.idxs, r.job_ids, r.run_leases, r.keys) u(idx, job_id, lease, key)
    )
    select x.b, x.j, x.k, x.open,
           not x.open and exists (select 1 from {{schema}}.deferred_jobs d
                                   where d.job_id = x.j and d.state = 'available')
      from (select m.*, m.lease = max(m.lease) over (partition by m.j) as latest from m) x
     where x.open
        or (x.latest and (exists (select 1 from {{schema}}.deferred_jobs d where d.job_id = x.j)
                          or exists (select 1 from {{schema}}.ready_entries e
                                      where e.job_id = x.j and e.run_lease >= x.lease
                                        and not exists (select 1 from {{schema}}.ready_tombstones t
                                                         where t.slot = e.slot and t.lane_id = e.lane_id
                                                           and t.lane_seq = e.lane_seq)
                                        and not {{schema}}.lane_covers(e.lane_id, e.lane_seq))));
end
$$;

-- held_in() of all a queue's hold rows: what operator reads show.
create function {{schema}}.held_members(p_queue text, p_fifo boolean)
  returns table (batch_id bigint, job_id bigint, key text, running boolean, parked boolean)
  language plpgsql stable
  as $$
begin
  return query select * from {{schema}}.held_in(array(select h from {{schema}}.limit_holds h where h.queue = p_queue),
                                                p_fifo);
end
$$;

-- The slots the hold rows p_rows hold now, without strict FIFO (a member holds while it is open): how many
-- attempts of each key, as parallel arrays of distinct keys and their counts, how many in all, and the rows none
-- of whose members holds one any more (to give back). A pure read, one statement: every open member once.
create function {{schema}}.open_holds(p_rows {{schema}}.limit_holds[], out keys text[], out counts int[],
    out total int, out gone bigint[])
  language plpgsql stable
  as $$
begin
  keys := '{}';
  counts := '{}';
  total := 0;
  gone := '{}';
  if coalesce(cardinality(p_rows), 0) = 0 then
    return;
  end if;
  with r as materialized (select * from {{schema}}.hold_receipts(p_rows)),
  open as materialized (
    select r.batch_id, u.key from r cross join lateral unnest(r.idxs, r.keys) u(idx, key)
     where r.present and not r.closed @> u.idx
  )
  select coalesce(array_agg(k.key), '{}'), coalesce(array_agg(k.n), '{}'), coalesce(sum(k.n), 0)::int,
         array(select r.batch_id from r where not exists (select 1 from open o where o.batch_id = r.batch_id))
    into keys, counts, total, gone
    from (select o.key, count(*)::int as n from open o group by o.key) k;
end
$$;

-- Reads a strict FIFO queue's holds for a claim, under its limits lock: how many attempts of each key hold a
-- slot now (not parked at the gate), as open_holds() gives them, and their job ids (a FIFO job running again
-- takes its own slot). Hold rows none of whose members holds a slot any more are deleted (given back).
create function {{schema}}.read_fifo_holds(p_queue text, out keys text[], out counts int[], out total int,
    out job_ids bigint[])
  language plpgsql
  as $$
declare
  v_rows {{schema}}.limit_holds[] := array(select h from {{schema}}.limit_holds h where h.queue = p_queue);
begin
  with held as materialized (select * from {{schema}}.held_in(v_rows, true)),
  gone as (
    delete from {{schema}}.limit_holds h
     using unnest(v_rows) r
     where h.batch_id = r.batch_id
       and not exists (select 1 from held x where x.batch_id = r.batch_id)
  )
  select coalesce(array_agg(k.key), '{}'), coalesce(array_agg(k.n), '{}'), coalesce(sum(k.n), 0)::int,
         array(select x.job_id from held x where not x.parked)
    into keys, counts, total, job_ids
    from (select x.key, count(*)::int as n from held x where not x.parked group by x.key) k;
end
$$;

-- How many attempts of each of p_keys hold a slot: those of the holds the claim read (p_hold_keys with
-- p_hold_counts, from open_holds() or read_fifo_holds(): a key may come more than once) and those the claim
-- started since (p_own_keys, a key once per start). Each key of p_keys once.
create function {{schema}}.slots_used(p_keys text[], p_hold_keys text[], p_hold_counts int[], p_own_keys text[])
  returns table (key text, n int)
  language sql immutable
  as $$
    select k.key, (coalesce(h.n, 0) + coalesce(o.n, 0))::int
      from (select distinct u.key from unnest(p_keys) u(key)) k
      left join (select h.key, sum(h.n) as n from unnest(p_hold_keys, p_hold_counts) h(key, n) group by h.key) h
             on h.key = k.key
      left join (select o.key, count(*) as n from unnest(p_own_keys) o(key) group by o.key) o on o.key = k.key
  $$;

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

-- A receipt's members as its JSON lists them (claimed_json()), in member order: job id, run lease and key.
-- The JSON is converted once (a json value is parsed again by each field read of it). Members left null are
-- skipped.
create function {{schema}}.receipt_keys(p_limits jsonb, p_jobs json, out idxs int[], out job_ids bigint[],
    out leases bigint[], out keys text[])
  language plpgsql stable
  as $$
declare
  v_path text[] := string_to_array(p_limits #>> '{key,arg}', '.');
begin
  select array_agg(e.o::int order by e.o), array_agg((e.j ->> 0)::bigint order by e.o),
         array_agg((e.j ->> 5)::bigint order by e.o),
         array_agg(coalesce(e.j -> 9 ->> 'limitKey', e.j -> 2 #>> v_path, '') order by e.o)
    into idxs, job_ids, leases, keys
    from jsonb_array_elements(p_jobs::jsonb) with ordinality e(j, o)
   where jsonb_typeof(e.j) = 'array';
end
$$;

-- Records the starts of a receipt's members that run (given as parallel arrays): the receipt's hold row, and
-- the rates' logs.
create function {{schema}}.record_starts(p_queue text, p_limits jsonb, p_slot smallint, p_batch bigint,
    p_idxs int[], p_job_ids bigint[], p_leases bigint[], p_keys text[], p_now timestamptz) returns void
  language plpgsql
  as $$
begin
  if coalesce(cardinality(p_idxs), 0) = 0 then
    return;
  end if;
  insert into {{schema}}.limit_holds (batch_id, queue, slot, idxs, job_ids, run_leases, keys, held_at)
  values (p_batch, p_queue, p_slot, p_idxs, p_job_ids, p_leases, p_keys, p_now);
  if p_limits #> '{perKey,rate}' is not null then
    insert into {{schema}}.limit_starts (queue, scope, key, at, n)
    select p_queue, 'key', m.key, p_now, count(*) from unnest(p_keys) m(key) group by m.key;
  end if;
  if p_limits #> '{queue,rate}' is not null then
    insert into {{schema}}.limit_starts (queue, scope, key, at, n)
    values (p_queue, 'queue', '', p_now, cardinality(p_idxs));
  end if;
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
-- members' keys and job ids.
create function {{schema}}.admit_gated(p_queue text, p_limits jsonb, p_room int, p_gate_keys text[],
    p_hold_keys text[], p_hold_counts int[], p_own_keys text[], p_instance text, p_deadline_secs int,
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
  v_members record;
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
              from {{schema}}.slots_used(p_gate_keys, p_hold_keys, p_hold_counts, p_own_keys) u) r
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
  for b in select * from {{schema}}.claim_lane(v_lane, cardinality(v_moved), p_instance, p_deadline_secs) loop
    v_members := {{schema}}.receipt_keys(p_limits, b.jobs);
    perform {{schema}}.record_starts(p_queue, p_limits, b.claim_slot, b.batch_id, v_members.idxs,
                                     v_members.job_ids, v_members.leases, v_members.keys, p_now);
    batch_id := b.batch_id;
    claim_slot := b.claim_slot;
    n := b.n;
    jobs := b.jobs;
    keys := v_members.keys;
    job_ids := v_members.job_ids;
    return next;
  end loop;
end
$$;

-- Decides the members of one receipt a claim took from the lanes: in member order, a member runs when its key
-- has no job waiting at the gate and still has room (counting those before it), and the queue still has room
-- (p_room). A member whose job holds its key's slot already (p_used_jobs: a strict FIFO key's job running again)
-- runs first, in that slot, whoever waits. The others are closed at once and wait at the gate, their attempt not
-- spent. Records the starts of those that run. Returns the receipt's JSON with null for each member that does not
-- run, how many run, and their job ids and keys. p_idxs, p_job_ids, p_leases, p_keys: the receipt's members
-- (receipt_keys()). p_hold_keys, p_hold_counts, p_own_keys: the slots held (slots_used()), so a key's room is
-- counted in memory, not looked up.
create function {{schema}}.sort_receipt(p_queue text, p_limits jsonb, p_slot smallint, p_batch bigint,
    p_jobs json, p_idxs int[], p_job_ids bigint[], p_leases bigint[], p_keys text[], p_room int,
    p_hold_keys text[], p_hold_counts int[], p_own_keys text[], p_used_jobs bigint[], p_now timestamptz,
    out jobs json, out n int, out run_jobs bigint[], out run_keys text[])
  language plpgsql
  as $$
declare
  v_cap int := (p_limits #>> '{perKey,concurrency}')::int;
  v_rate jsonb := p_limits #> '{perKey,rate}';
  -- Only a strict FIFO key's job can hold its slot before its claim (see held_members()).
  v_fifo boolean := coalesce((p_limits #>> '{perKey,fifo}')::boolean, false);
  v_runs boolean[];
  -- Whether any job waits at the gate: only then is each key looked for there.
  v_gated boolean := exists (select 1 from {{schema}}.deferred_jobs d where d.state = 'available' and d.queue = p_queue);
begin
  with m as (
    select u.idx, u.key, v_fifo and u.job_id = any(p_used_jobs) as held
      from unnest(p_idxs, p_keys, p_job_ids) u(idx, key, job_id)
  ), k as (
    select m.key, count(*) filter (where m.held)::int as held from m group by m.key
  ), rooms as (
    select k.key,
           least(coalesce(v_cap - u.n + k.held, 2147483647),
                 case when v_rate is null then 2147483647
                      else {{schema}}.rate_room(p_queue, 'key', k.key, v_rate, p_now) end) as room,
           -- A probe per key of limit_gate_hash, all its columns given (a scalar subquery with a limit is never
           -- turned into a scan of the whole gate; a generic plan of "gate_key = any(keys)" read every waiting
           -- job's entry and filtered it).
           v_gated and (select true from {{schema}}.deferred_jobs d
                         where d.state = 'available' and d.queue = p_queue and hashtext(d.gate_key) = hashtext(k.key)
                           and d.gate_key = k.key
                         limit 1) is not null as waiting
      from k join {{schema}}.slots_used(p_keys, p_hold_keys, p_hold_counts, p_own_keys) u on u.key = k.key
  ), by_key as (
    select m.idx,
           (m.held or not r.waiting)
             and row_number() over (partition by m.key order by m.held desc, m.idx) <= r.room as fits
      from m join rooms r on r.key = m.key
  )
  select array_agg(d.runs order by d.idx) into v_runs
    from (select b.idx, b.fits and count(*) filter (where b.fits) over (order by b.idx) <= p_room as runs
            from by_key b) d;
  if false = any(v_runs) then
    with gated as (
      select u.o::int as idx, u.elem, u.key
        from rows from (json_array_elements(p_jobs), unnest(p_keys), unnest(v_runs)) with ordinality
             as u(elem, key, runs, o)
       where not u.runs
    ), closure as (
      insert into {{schema}}.closure_batches (slot, batch_id, idxs, n, outcome)
      select p_slot, p_batch, range_agg(int4range(g.idx, g.idx + 1)), count(*), 'settled' from gated g
    )
    insert into {{schema}}.deferred_jobs
      (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta,
       gate_key)
    select (g.elem ->> 0)::bigint, g.elem ->> 1, p_queue, (g.elem ->> 6)::smallint, (g.elem -> 2)::jsonb,
           (g.elem ->> 3)::smallint - 1, (g.elem ->> 4)::smallint, (g.elem ->> 5)::bigint, 'infinity', 'available',
           to_timestamp((g.elem ->> 7)::float8 / 1000000), (g.elem -> 9)::jsonb, g.key
      from gated g;
  end if;
  run_jobs := array(select u.id from unnest(p_job_ids, v_runs) u(id, runs) where u.runs);
  run_keys := array(select u.key from unnest(p_keys, v_runs) u(key, runs) where u.runs);
  perform {{schema}}.record_starts(p_queue, p_limits, p_slot, p_batch,
    array(select u.idx from unnest(p_idxs, v_runs) u(idx, runs) where u.runs), run_jobs,
    array(select u.lease from unnest(p_leases, v_runs) u(lease, runs) where u.runs), run_keys, p_now);
  n := cardinality(run_jobs);
  if n = cardinality(v_runs) then
    jobs := p_jobs;
  else
    jobs := (select json_agg(case when u.runs then u.elem end order by u.o)
               from rows from (json_array_elements(p_jobs), unnest(v_runs)) with ordinality as u(elem, runs, o));
  end if;
end
$$;

-- The claim of a limited queue (claim() calls it when the queue has limits). Same result as claim(), plus
-- retry_ms on a row without a batch when jobs wait at the gate: when to claim again (a rate's window opens
-- then; a slot held by another host's attempt frees at no time the claim can know, so at most 100 ms).
create function {{schema}}.claim_limited(p_queue text, p_limits jsonb, p_max int, p_instance text, p_aging_secs int,
    p_deadline_secs int, p_wait_ms int)
  returns table (batch_id bigint, claim_slot smallint, jobs json, bulk boolean, retry_ms int)
  language plpgsql
  set jit = off
  as $$
declare
  v_now timestamptz;
  v_fifo boolean := coalesce((p_limits #>> '{perKey,fifo}')::boolean, false);
  -- The slots held (not parked at the gate): the holds read (keys with their counts, how many in all), the keys
  -- this claim starts (a key once per start), and for a strict FIFO queue the job ids of both.
  v_hold_keys text[];
  v_hold_counts int[];
  v_hold_total int;
  v_own_keys text[] := '{}';
  v_used_jobs bigint[] := '{}';
  v_seen {{schema}}.limit_holds[];
  v_early record;
  v_late record;
  v_room int;
  v_left int;
  v_contended boolean := false;
  v_sorted record;
  v_members record;
  v_gate text[];
  -- This claim sent fresh jobs to the gate: more may be runnable behind them in the lanes.
  v_gated boolean := false;
  v_opens timestamptz;
  b record;
begin
  -- Without strict FIFO, the holds are read before the lock, so that the fleet's claims read them side by side
  -- rather than in turn. Read early, a hold counts at least what it holds at the claim's turn (its members
  -- close at any time, never reopen: a slot freed meanwhile still counts as held, never one too many), and the
  -- only holds an early read misses are those of claims that committed meanwhile: they are read under the lock.
  if not v_fifo then
    v_seen := array(select h from {{schema}}.limit_holds h where h.queue = p_queue);
    v_early := {{schema}}.open_holds(v_seen);
  end if;
  perform pg_advisory_xact_lock({{schema}}.lock_ns('limits'), hashtext(p_queue));
  -- A start is logged at the claim's transaction time, which its receipts record (claimed_at): exact in those
  -- terms. A claim that waited for the lock logs its starts earlier than it made them; it counted every start
  -- logged after its time as inside its window, so any window still holds at most the limit.
  v_now := now();
  -- What holds a slot now; hold rows none of whose members does any more are given back.
  if v_fifo then
    v_late := {{schema}}.read_fifo_holds(p_queue);
    v_hold_keys := v_late.keys;
    v_hold_counts := v_late.counts;
    v_hold_total := v_late.total;
    v_used_jobs := v_late.job_ids;
  else
    v_late := {{schema}}.open_holds(array(
      select h from {{schema}}.limit_holds h
       where h.queue = p_queue and h.batch_id not in (select r.batch_id from unnest(v_seen) r)));
    delete from {{schema}}.limit_holds h where h.batch_id = any (v_early.gone || v_late.gone);
    v_hold_keys := v_early.keys || v_late.keys;
    v_hold_counts := v_early.counts || v_late.counts;
    v_hold_total := v_early.total + v_late.total;
  end if;
  -- The keys waiting at the gate that this claim considers (a bounded number: see gate_keys()).
  v_gate := array(select k.key from {{schema}}.gate_keys(p_queue, greatest(64, 2 * p_max)) k);
  v_room := greatest(0, least(p_max,
    coalesce((p_limits #>> '{queue,concurrency}')::int - v_hold_total, 2147483647),
    {{schema}}.rate_room(p_queue, 'queue', '', p_limits #> '{queue,rate}', v_now)));
  v_left := v_room;
  if v_left > 0 then
    for b in select * from {{schema}}.admit_gated(p_queue, p_limits, v_left, v_gate, v_hold_keys, v_hold_counts,
                                                  v_own_keys, p_instance, p_deadline_secs, v_now) loop
      v_own_keys := v_own_keys || b.keys;
      if v_fifo then
        v_used_jobs := v_used_jobs || b.job_ids;
      end if;
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := b.jobs;
      bulk := false;
      retry_ms := null;
      return next;
    end loop;
  end if;
  -- Fresh rows: one pass over the lanes (claim_lanes()), for what room is left. Once only per transaction: a
  -- lane's cursors are healed from the receipts this transaction sees, its own included, and stored at once
  -- (sequences ignore a rollback), so a second pass would store a high-water that a rolled-back claim's receipts
  -- made and skip their rows for good. A pass that sent jobs to the gate asks for the next claim at once.
  -- While jobs wait at the gate (a limit binds), the pass reads at least 64 rows, so a busy key's backlog ahead
  -- of other keys' jobs moves to the gate in a few claims even when little room is left; what it reads beyond
  -- the room waits at the gate and goes first next time.
  if v_left > 0 then
    for b in select * from {{schema}}.claim_lanes(p_queue,
                                                  case when exists (select 1 from {{schema}}.deferred_jobs d
                                                                     where d.state = 'available' and d.queue = p_queue)
                                                       then greatest(v_left, 64) else v_left end,
                                                  p_instance, p_aging_secs, p_deadline_secs, p_wait_ms) loop
      if b.batch_id is null then
        v_contended := true;
        continue;
      end if;
      v_members := {{schema}}.receipt_keys(p_limits, b.jobs);
      v_sorted := {{schema}}.sort_receipt(p_queue, p_limits, b.claim_slot, b.batch_id, b.jobs, v_members.idxs,
                                          v_members.job_ids, v_members.leases, v_members.keys, v_left,
                                          v_hold_keys, v_hold_counts, v_own_keys, v_used_jobs, v_now);
      v_gated := v_gated or v_sorted.n < json_array_length(b.jobs);
      continue when v_sorted.n = 0;
      v_own_keys := v_own_keys || v_sorted.run_keys;
      if v_fifo then
        v_used_jobs := v_used_jobs || v_sorted.run_jobs;
      end if;
      v_left := v_left - v_sorted.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := v_sorted.jobs;
      bulk := b.bulk;
      retry_ms := null;
      return next;
    end loop;
  end if;
  if v_contended or exists (select 1 from {{schema}}.deferred_jobs d where d.state = 'available' and d.queue = p_queue) then
    -- The earliest a full rate window opens: the queue's, else the earliest of the waiting keys' whose window is
    -- full. (A key waiting for a slot has no time to give.)
    if {{schema}}.rate_room(p_queue, 'queue', '', p_limits #> '{queue,rate}', v_now) = 0 then
      v_opens := {{schema}}.rate_opens(p_queue, 'queue', '', p_limits #> '{queue,rate}', v_now);
    elsif p_limits #> '{perKey,rate}' is not null then
      v_opens := (select min({{schema}}.rate_opens(p_queue, 'key', k.key, p_limits #> '{perKey,rate}', v_now))
                    from unnest(v_gate) k(key)
                   where {{schema}}.rate_room(p_queue, 'key', k.key, p_limits #> '{perKey,rate}', v_now) = 0);
    end if;
    batch_id := null;
    claim_slot := null;
    jobs := null;
    bulk := null;
    retry_ms := case when v_contended then null
                     when v_gated and v_left > 0 then 1
                     else least(100, greatest(1, ceil(extract(epoch from coalesce(v_opens, v_now + interval '100 ms')
                                                                        - clock_timestamp()) * 1000)))::int end;
    return next;
  end if;
end
$$;

-- Sends the jobs waiting at a queue's gate back to its lanes (as promotion does, oldest first per priority):
-- its limits were lifted, so no claim would let them through. Returns how many.
create function {{schema}}.open_gate(p_queue text) returns int
  language plpgsql
  as $$
declare
  g record;
  v_total int := 0;
begin
  for g in
    with gone as (
      delete from {{schema}}.deferred_jobs d where d.state = 'available' and d.queue = p_queue returning d.*
    )
    select gone.priority,
           array_agg(row(gone.job_id, gone.kind, gone.args, gone.attempt, gone.max_attempts, gone.run_lease,
                         gone.enqueued_at, now(), gone.meta)::{{schema}}.job_body order by gone.job_id) as bodies
      from gone group by gone.priority order by gone.priority
  loop
    perform {{schema}}.append_ready(p_queue, g.priority, g.bodies);
    v_total := v_total + cardinality(g.bodies);
  end loop;
  return v_total;
end
$$;

-- After a queue's limits were written: with none left, its gate opens (open_gate()); with some, its gate lane
-- exists before a claim needs it.
create function {{schema}}.limits_changed(p_queue text) returns void
  language plpgsql
  as $$
begin
  if (select {{schema}}.effective_limits(s.limits_declared, s.limits_override) from {{schema}}.queue_settings s
       where s.queue = p_queue) is null then
    perform {{schema}}.open_gate(p_queue);
  else
    perform {{schema}}.gate_lane(p_queue);
  end if;
end
$$;

-- Sets (or, with null, clears) an operator's override of a queue's limits. Returns the effective limits.
create function {{schema}}.set_limits_override(p_queue text, p_override jsonb) returns jsonb
  language plpgsql
  as $$
declare
  v_effective jsonb;
begin
  insert into {{schema}}.queue_settings (queue, limits_override) values (p_queue, p_override)
  on conflict (queue) do update set limits_override = excluded.limits_override, updated_at = now()
  returning {{schema}}.effective_limits(queue_settings.limits_declared, queue_settings.limits_override)
    into v_effective;
  perform {{schema}}.limits_changed(p_queue);
  return v_effective;
end
$$;
