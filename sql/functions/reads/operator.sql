-- Operator reads beyond counts: queue health, job listing, live hosts and their descriptors, storage. Each is
-- cheap enough to poll: counts come from cursors, receipts and batch rows, listings from indexes, storage
-- figures from the catalog and the statistics collector.

-- Per queue: the counts of queue_counts(), completions and failures in the last p_window_secs (from closure
-- batches, slot tallies and compact history, not from job rows), the age of the oldest available job (each lane's head),
-- whether the queue has live rows or open receipts in the ring's oldest slot (what may hold prune), and its
-- enqueue shards.
create function {{schema}}.queue_health(p_window_secs int)
  returns table (queue text, paused boolean, available bigint, running bigint, waiting bigint, scheduled bigint,
                 retryable bigint, completed bigint, failed bigint, cancelled bigint, dlq bigint, blocked bigint,
                 completed_recent bigint, failed_recent bigint, oldest_available_at timestamptz,
                 in_oldest_slot boolean, enqueue_shards smallint)
  language plpgsql stable
  set jit = off
  as $$
declare
  v_since timestamptz := now() - make_interval(secs => p_window_secs);
  v_oldest smallint := {{schema}}.oldest_sealed_slot();
  -- Completions in the window are summed from closures in the slots not tallied, and in tallied slots whose
  -- completions straddle the window's start; a tallied slot whose completions all fall inside it gives its
  -- tally (one wholly before it gives nothing).
  v_straddling smallint[] := array(select distinct t.slot from {{schema}}.slot_tallies t
                                    where t.first_closed_at <= v_since and t.last_closed_at > v_since);
  v_scan smallint[] := {{schema}}.untallied_slots() || v_straddling;
begin
  -- Every figure is read once for all queues (materialized), not again inside each queue's row.
  return query
    with counts as (select * from {{schema}}.queue_counts()),
    recent_ring as materialized (
      select g.queue, sum(g.n)::bigint as n
        from (select b.slot, b.ready_slot, b.lane_id, l.queue, sum(c.n) as n,
                     min(coalesce(b.lane_seqs[1], b.first_seq)) as probe_seq
                from {{schema}}.closure_batches c
                join {{schema}}.claim_batches b on b.slot = c.slot and b.batch_id = c.batch_id
                join {{schema}}.lanes l on l.lane_id = b.lane_id
               where c.slot = any(v_scan) and b.slot = any(v_scan)
                 and c.outcome = 'completed' and c.closed_at > v_since
               group by b.slot, b.ready_slot, b.lane_id, l.queue) g
       -- completions whose rows were truncated are in compact history instead (as in queue_counts)
       where {{schema}}.receipt_rows_held(g.slot, g.ready_slot, g.lane_id, g.probe_seq)
       group by g.queue
    ), recent_tallied as materialized (
      select l.queue, sum(t.completed)::bigint as n
        from {{schema}}.slot_tallies t join {{schema}}.lanes l on l.lane_id = t.lane_id
       where t.first_closed_at > v_since and t.slot <> all(v_scan)
       group by l.queue
    ), recent_history as materialized (
      select l.queue, sum(h.n)::bigint as n
        from {{schema}}.completed_history h join {{schema}}.lanes l on l.lane_id = h.lane_id
       where h.closed_at > v_since group by l.queue
    ), recent_failed as materialized (
      select x.queue, count(*)::bigint as n from (
        select o.queue from {{schema}}.off_ring_jobs o where o.state = 'failed' and o.at > v_since
        union all
        select o.queue from {{schema}}.off_ring_jobs o where o.state = 'dlq' and o.at > v_since) x
       group by x.queue
    ), heads as materialized (
      select l.queue, min(h.ready_at) as oldest
        from {{schema}}.lanes l
        cross join lateral {{schema}}.lane_high(l) lh
        cross join lateral (
          select r.ready_at from {{schema}}.ready_entries r
           where r.lane_id = l.lane_id and r.lane_seq > lh.high
             and not exists (select 1 from {{schema}}.ready_tombstones t
                              where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)
           order by r.lane_seq limit 1) h
       group by l.queue
      union all
      -- Jobs waiting at a limited queue's gate (limit_gate.sql) are available too: the oldest of them, by when it
      -- was enqueued (a read of the queue's gate).
      select d.queue, min(d.enqueued_at) from {{schema}}.deferred_jobs d where d.state = 'available'
       group by d.queue
    ), blocking as materialized (
      select q as queue from {{schema}}.slot_holding_queues(v_oldest) q where v_oldest is not null
    )
    select c.queue, c.paused, c.available, c.running, c.waiting, c.scheduled, c.retryable, c.completed, c.failed,
           c.cancelled, c.dlq, c.blocked,
           coalesce((select r.n from recent_ring r where r.queue = c.queue), 0)
             + coalesce((select t.n from recent_tallied t where t.queue = c.queue), 0)
             + coalesce((select h.n from recent_history h where h.queue = c.queue), 0),
           coalesce((select f.n from recent_failed f where f.queue = c.queue), 0),
           (select min(h.oldest) from heads h where h.queue = c.queue),
           exists (select 1 from blocking k where k.queue = c.queue),
           {{schema}}.queue_shards(c.queue)
      from counts c order by c.queue;
end
$$;

-- The 'available' page of list_jobs(): each lane's next unclaimed jobs, in lane order through the primary key,
-- however many rows wait behind them: those that committed late into the lane's open gaps (a block whose
-- producer committed after later rows were claimed: they wait below the high-water) and those above its
-- high-water. Ring partitions are truncated, not vacuumed or analyzed, so their statistics are stale: on a 10M
-- backlog the planner took a bitmap scan of every waiting row and a sort (1 s). Bitmap scans are off here and
-- the tombstone check is a per-row filter (an anti-join would want the rows sorted), so each range stops after
-- p_limit rows.
create function {{schema}}.list_available(p_queue text, p_kind text, p_before_at timestamptz,
    p_after_at timestamptz, p_limit int)
  returns table (job_id bigint, state text, kind text, queue text, priority smallint, attempt int,
                 max_attempts int, at timestamptz)
  language sql stable
  set jit = off
  set enable_bitmapscan = off
  as $$
    select r.job_id, 'available'::text, r.kind, r.queue, r.priority, r.attempt::int, r.max_attempts::int, r.ready_at
      from {{schema}}.lanes l
      cross join lateral {{schema}}.lane_high(l) lh
      cross join lateral (
        select y.* from unnest({{schema}}.lane_open(l.lane_id, coalesce(pg_sequence_last_value(l.floor_seq), 0), lh.high)
                               + int8multirange(int8range(lh.high + 1, null))) g
        cross join lateral (
          select x.* from {{schema}}.ready_entries x
           where x.lane_id = l.lane_id and x.lane_seq >= lower(g)
             and x.lane_seq < coalesce(upper(g), 9223372036854775807)
             and (p_kind is null or x.kind = p_kind)
             and x.ready_at < p_before_at and x.ready_at >= p_after_at
             and (select t.lane_seq from {{schema}}.ready_tombstones t
                   where t.slot = x.slot and t.lane_id = x.lane_id and t.lane_seq = x.lane_seq) is null
           order by x.lane_seq limit p_limit) y
         order by y.lane_seq limit p_limit) r
     where p_queue is null or l.queue = p_queue
     order by r.ready_at, r.job_id limit p_limit
  $$;

-- The page of list_jobs() for a state off the ring (off_ring_jobs), newest first by id. Planned for the state and
-- bounds asked: a generic plan cannot skip the other states' tables and took the time index for an unbounded
-- page (29 ms against 0.7 on 200,000 history rows). Its own function, so the setting reaches no other read.
create function {{schema}}.list_off_ring(p_state text, p_queue text, p_kind text, p_before_id bigint,
    p_before_at timestamptz, p_after_at timestamptz, p_limit int)
  returns table (job_id bigint, state text, kind text, queue text, priority smallint, attempt int,
                 max_attempts int, at timestamptz)
  language plpgsql stable
  set jit = off
  set plan_cache_mode = force_custom_plan
  as $$
begin
  -- PL/pgSQL: its statements go through the plan cache, which the setting steers (a SQL function's do not).
  return query
    select o.job_id, o.state, o.kind, o.queue, o.priority, o.attempt, o.max_attempts, o.at
      from {{schema}}.off_ring_jobs o
     where o.state = p_state and (p_queue is null or o.queue = p_queue) and (p_kind is null or o.kind = p_kind)
       and o.job_id < p_before_id and o.at < p_before_at and o.at >= p_after_at
     order by o.job_id desc limit p_limit;
end
$$;

-- The span of completion times kept only in compact history (ids, no kind or args) for a queue, or for all:
-- a kind filter on completed jobs cannot find those. Nulls when there are none.
create function {{schema}}.compact_history_span(p_queue text, out oldest timestamptz, out newest timestamptz)
  language sql stable
  as $$
    select min(h.closed_at), max(h.closed_at)
      from {{schema}}.completed_history h
     where p_queue is null or h.lane_id in (select l.lane_id from {{schema}}.lanes l where l.queue = p_queue)
  $$;

-- Completed closures in ring slots p_slots, of the receipts of queue p_queue's lanes (every queue's when null),
-- settled in [p_after, p_before). Inlined into the caller, so p_slots prunes the partitions read.
create function {{schema}}.completed_closures(p_slots smallint[], p_queue text, p_before timestamptz,
    p_after timestamptz)
  returns table (slot smallint, batch_id bigint, idxs int4multirange, closed_at timestamptz)
  language sql stable
  as $$
    select cc.slot, cc.batch_id, cc.idxs, cc.closed_at
      from {{schema}}.closure_batches cc
     where cc.slot = any(p_slots) and cc.outcome = 'completed' and cc.closed_at < p_before and cc.closed_at >= p_after
       and (p_queue is null
            or (cc.slot, cc.batch_id) in (select b.slot, b.batch_id from {{schema}}.claim_batches b
                                           join {{schema}}.lanes q on q.lane_id = b.lane_id
                                          where b.slot = any(p_slots) and q.queue = p_queue))
  $$;

-- A page of jobs in one state, optionally of one queue and kind. Every branch reads an index or a bounded set:
-- most states newest first by id, below p_before_id; 'completed' newest first by completion time, before
-- p_before_at (terminal history, the ring's success history, and compact history, whose kind and args are
-- gone); 'available' each lane's next jobs above its high-water, oldest first (no deeper paging); 'running'
-- the open receipts' members. p_after_at and p_before_at bound the state's own time (the `at` column) to
-- [p_after_at, p_before_at) in every state: a filter on the rows the branch reads, and for 'completed' also its
-- paging key.
create function {{schema}}.list_jobs(p_state text, p_queue text, p_kind text, p_before_id bigint,
    p_before_at timestamptz, p_after_at timestamptz, p_limit int)
  returns table (job_id bigint, state text, kind text, queue text, priority smallint, attempt int,
                 max_attempts int, at timestamptz)
  language plpgsql stable
  set jit = off
  as $$
declare
  v_before bigint := coalesce(p_before_id, 9223372036854775807);
  v_before_at timestamptz := coalesce(p_before_at, 'infinity');
  v_after_at timestamptz := coalesce(p_after_at, '-infinity');
  v_scan smallint[];
  v_floor timestamptz;
begin
  if p_state in ('scheduled', 'retryable', 'blocked', 'failed', 'cancelled', 'dlq', 'waiting_external') then
    -- Off the ring: the one table that holds the state. Callback completions in terminal history are
    -- 'completed' and read below with the ring's.
    return query
      select * from {{schema}}.list_off_ring(p_state, p_queue, p_kind, v_before, v_before_at, v_after_at, p_limit);
  elsif p_state = 'available' then
    -- In the ring's lanes, and at a limited queue's gate (limit_gate.sql).
    return query
      select * from (
        select * from {{schema}}.list_available(p_queue, p_kind, v_before_at, v_after_at, p_limit)
        union all
        select * from {{schema}}.list_off_ring('available', p_queue, p_kind, v_before, v_before_at, v_after_at,
                                               p_limit)) a
       order by a.at, a.job_id limit p_limit;
  elsif p_state = 'running' then
    -- Open receipts first (open_receipts(): their closures counted in one pass, not probed receipt by receipt),
    -- then only their members: a ring a pinned snapshot keeps full of settled receipts is not walked member by
    -- member.
    return query
      select r.job_id, 'running'::text, r.kind, r.queue, r.priority, r.attempt + 1, r.max_attempts::int, b.claimed_at
        from {{schema}}.open_receipts(p_queue) b
        cross join lateral {{schema}}.receipt_members(b.slot, b.batch_id) m
        -- A probe per open member (lateral, one row): a join let the planner sort every ready row instead.
        cross join lateral (select x.* from {{schema}}.ready_entries x
                             where x.slot = m.ready_slot and x.lane_id = m.lane_id and x.lane_seq = m.lane_seq
                             limit 1) r
       where (p_kind is null or r.kind = p_kind) and r.job_id < v_before
         and b.claimed_at < v_before_at and b.claimed_at >= v_after_at
         -- A probe per open member (a subplan reads the receipt's own slot): as an anti-join, every slot's
         -- closures were hashed.
         and (select 1 from {{schema}}.closure_batches c
               where c.slot = b.slot and c.batch_id = b.batch_id and c.idxs @> m.idx limit 1) is null
       order by r.job_id desc limit p_limit;
  elsif p_state = 'completed' then
    -- The ring slots to read closures from: those not tallied, and, without a kind filter, only the tallied
    -- ones holding a completion of the queue at least as new as the p_limit-th newest closure of those (every
    -- closure yields a row, here or in compact history, so none older can make the page). A kind filter
    -- reads every slot: a closure need not name a job of that kind.
    v_scan := {{schema}}.untallied_slots();
    if p_kind is null and cardinality(v_scan) < 16 then
      select c.closed_at into v_floor
        from {{schema}}.completed_closures(v_scan, p_queue, v_before_at, v_after_at) c
       order by c.closed_at desc offset p_limit - 1 limit 1;
    end if;
    v_scan := v_scan || array(
      select distinct t.slot from {{schema}}.slot_tallies t
       where t.last_closed_at >= greatest(coalesce(v_floor, '-infinity'), v_after_at)
         and t.first_closed_at < v_before_at
         and (p_queue is null or t.lane_id in (select q.lane_id from {{schema}}.lanes q where q.queue = p_queue)));
    -- Three homes, each read newest first with the queue (and kind, where it is kept) filtered BEFORE the limit:
    -- terminal history; the ring's completed receipt members (closure batches of the queue's lanes, their
    -- members read until p_limit match); compact history (rows of the queue's lanes; it keeps no kind, so a
    -- kind filter cannot find what only it holds: compact_history_span() says when).
    return query
      select x.* from (
        (select o.job_id, 'completed'::text, o.kind, o.queue, o.priority, o.attempt, o.max_attempts, o.at
           from {{schema}}.off_ring_jobs o
          where o.state = 'completed' and (p_queue is null or o.queue = p_queue)
            and (p_kind is null or o.kind = p_kind) and o.at < v_before_at and o.at >= v_after_at
          order by o.at desc limit p_limit)
        union all
        (select r.job_id, 'completed'::text, r.kind, r.queue, r.priority, r.attempt + 1, r.max_attempts::int, c.closed_at
           from (select cc.* from {{schema}}.completed_closures(v_scan, p_queue, v_before_at, v_after_at) cc
                  order by cc.closed_at desc
                  -- Without a kind filter the newest p_limit closures are enough: each names a completion at
                  -- least, and one whose rows were truncated is in compact history (the third branch). A held
                  -- ring keeps hundreds of thousands of them: expanding them all cost a page 2 s.
                  limit case when p_kind is null then p_limit end) c
           cross join lateral {{schema}}.receipt_members(c.slot, c.batch_id) m
           join {{schema}}.ready_entries r
             on r.slot = m.ready_slot and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq
          where c.idxs @> m.idx and (p_kind is null or r.kind = p_kind)
          order by c.closed_at desc limit p_limit)
        union all
        (select g.id, 'completed'::text, null::text, l.queue, l.priority, h.attempt::int, null::int, h.closed_at
           from (select * from {{schema}}.completed_history hh where hh.closed_at < v_before_at
                    and hh.closed_at >= v_after_at
                    and (p_queue is null or hh.lane_id in (select q.lane_id from {{schema}}.lanes q where q.queue = p_queue))
                  order by hh.closed_at desc limit p_limit) h
           join {{schema}}.lanes l on l.lane_id = h.lane_id
           cross join lateral (select generate_series(lower(rg), upper(rg) - 1) as id from unnest(h.ids) rg) g
          where p_kind is null
          limit p_limit)) x
       order by x.at desc, x.job_id desc limit p_limit;
  else
    raise exception 'unknown job state %', p_state using errcode = '22023';
  end if;
end
$$;

-- Live hosts and their snapshots (a host is live while its heartbeat is younger than p_live_secs and it has
-- not stopped).
create function {{schema}}.runtime_list(p_live_secs int)
  returns table (instance_id text, hostname text, pid int, version text, queues text[], concurrency jsonb,
                 in_flight int, is_leader boolean, started_at timestamptz, heartbeat_at timestamptz,
                 stopped_at timestamptz, live boolean)
  language sql stable
  as $$
    select ri.instance_id, ri.hostname, ri.pid, ri.version, ri.queues, ri.concurrency, ri.in_flight, ri.is_leader,
           ri.started_at, ri.heartbeat_at, ri.stopped_at,
           ri.stopped_at is null and ri.heartbeat_at > now() - make_interval(secs => p_live_secs)
      from {{schema}}.runtime_instances ri
     order by ri.started_at desc
  $$;

-- Descriptors as the fleet reports them: the newest report of each queue and kind, whether any live host
-- refreshed it within p_live_secs (not stale) and whether live hosts disagree on it (drift).
create function {{schema}}.descriptors(p_live_secs int)
  returns table (subject text, name text, descriptor jsonb, hash text, reported_at timestamptz, reporters int,
                 stale boolean, drift boolean)
  language sql stable
  as $$
    with live as (
      select d.*, ri.instance_id is not null and ri.stopped_at is null
                  and ri.heartbeat_at > now() - make_interval(secs => p_live_secs)
                  and d.reported_at > now() - make_interval(secs => p_live_secs * 2) as is_live
        from {{schema}}.descriptor_reports d
        left join {{schema}}.runtime_instances ri on ri.instance_id = d.instance_id
    )
    select distinct on (l.subject, l.name) l.subject, l.name, l.descriptor, l.hash, l.reported_at,
           (select count(*) from live x where x.subject = l.subject and x.name = l.name and x.is_live)::int,
           not exists (select 1 from live x where x.subject = l.subject and x.name = l.name and x.is_live),
           (select count(distinct x.hash) from live x where x.subject = l.subject and x.name = l.name and x.is_live) > 1
      from live l
     order by l.subject, l.name, l.reported_at desc
  $$;

-- Storage at a glance: per table family of the ring and per plain table, its size on disk, live and dead
-- tuples (statistics collector estimates), read from the catalog without scanning anything.
create function {{schema}}.storage_status()
  returns table (family text, partitions int, bytes bigint, live_tuples bigint, dead_tuples bigint)
  language sql stable
  as $$
    select regexp_replace(c.relname, '_[0-9]+$', '') as family,
           count(*)::int,
           sum(pg_total_relation_size(c.oid))::bigint,
           coalesce(sum(s.n_live_tup), 0)::bigint,
           coalesce(sum(s.n_dead_tup), 0)::bigint
      from pg_class c
      left join pg_stat_user_tables s on s.relid = c.oid
     where c.relnamespace = to_regnamespace('{{schema}}') and c.relkind = 'r'
     group by 1 order by 3 desc
  $$;
