-- Operator reads: counts, one job's state, the ring's state. Off the hot path, yet cheap enough to poll:
-- counts come from cursors, receipts and small tables, never from scanning job rows one by one.

-- Per-queue counts. available = positions between the claimed high-water and the enqueue cursor (less the
-- cancelled ones) plus rows that committed late into open gaps; positions of producers still in flight or
-- rolled back and not yet passed by a claim count too, so it can over-count briefly. running = open receipt
-- members; completed = success history still held (the ring's receipts, slot tallies, compact history, and
-- callback completions in terminal history). The states off the ring are counted through off_ring_jobs, each
-- from its table's (queue, state, job_id) or (queue, job_id) index alone.
create function {{schema}}.queue_counts()
  returns table (queue text, paused boolean, available bigint, running bigint, waiting bigint, scheduled bigint,
                 retryable bigint, completed bigint, failed bigint, cancelled bigint, dlq bigint, blocked bigint)
  language plpgsql stable
  set jit = off
  as $$
declare
  -- A variable, not a subquery: the slots not tallied prune the receipt and closure partitions read.
  v_live smallint[] := {{schema}}.untallied_slots();
begin
  return query
    -- Each per-queue figure is read once for all queues (materialized): a CTE inlined into the per-queue
    -- subqueries below was computed again for every queue.
    with lane_now as (
      select l.lane_id, l.queue, h.high, coalesce(pg_sequence_last_value(l.floor_seq), 0) as floor_pos,
             {{schema}}.lane_enqueued(l) as enq
        from {{schema}}.lanes l cross join lateral {{schema}}.lane_high(l) h
    ), avail as materialized (
      select ln.queue,
             sum(greatest(ln.enq - ln.high, 0)
                 - (select count(*) from {{schema}}.ready_tombstones t where t.lane_id = ln.lane_id and t.lane_seq > ln.high)
                 -- Each open gap is its own range scan of the lane (lateral): as a join, the planner hashed
                 -- every row the lane holds in the ring to count the few in its gaps.
                 + case when ln.floor_pos < ln.high then (
                     select count(*) from unnest({{schema}}.lane_open(ln.lane_id, ln.floor_pos, ln.high)) g
                      cross join lateral (
                        select 1 from {{schema}}.ready_entries r
                         where r.lane_id = ln.lane_id and r.lane_seq >= lower(g) and r.lane_seq < upper(g)
                           and not exists (select 1 from {{schema}}.ready_tombstones t
                                            where t.slot = r.slot and t.lane_id = r.lane_id
                                              and t.lane_seq = r.lane_seq)) x)
                   else 0 end)::bigint as n
        from lane_now ln group by ln.queue
    ), receipts as materialized (
      -- The receipts and closures of the slots not tallied (tally_slots()), each read once and joined (a held
      -- ring keeps tens of thousands: probing each receipt's closures in turn cost the Queues page half a
      -- second). Completions of receipts whose ready rows were truncated are counted in compact history
      -- instead: one probe per slot, slot read and lane (receipt_rows_held()), not one per receipt. A tallied
      -- slot's receipts are all settled, so running is all here.
      select g.queue, sum(g.running)::bigint as running,
             coalesce(sum(g.completed) filter (where {{schema}}.receipt_rows_held(g.slot, g.ready_slot, g.lane_id,
                                                                                 g.probe_seq)), 0)::bigint as completed
        from (select b.slot, b.ready_slot, b.lane_id, l.queue, sum(b.size - coalesce(c.n, 0)) as running,
                     sum(c.completed) as completed,
                     min(coalesce(b.lane_seqs[1], b.first_seq)) filter (where c.completed > 0) as probe_seq
                from {{schema}}.claim_batches b join {{schema}}.lanes l on l.lane_id = b.lane_id
                left join (select cc.slot, cc.batch_id, sum(cc.n) as n,
                                  sum(cc.n) filter (where cc.outcome = 'completed') as completed
                             from {{schema}}.closure_batches cc where cc.slot = any(v_live)
                            group by cc.slot, cc.batch_id) c
                  on c.slot = b.slot and c.batch_id = b.batch_id
               where b.slot = any(v_live)
               group by b.slot, b.ready_slot, b.lane_id, l.queue) g
       group by g.queue
    ), tallied as materialized (
      select l.queue, sum(t.completed)::bigint as n
        from {{schema}}.slot_tallies t join {{schema}}.lanes l on l.lane_id = t.lane_id group by l.queue
    ), history as materialized (
      select l.queue, sum(h.n)::bigint as n
        from {{schema}}.completed_history h join {{schema}}.lanes l on l.lane_id = h.lane_id group by l.queue
    ), q as (
      select l.queue from {{schema}}.lanes l union select o.queue from {{schema}}.off_ring_queues o
      union select s.queue from {{schema}}.queue_settings s
    )
    select q.queue,
           coalesce((select s.paused_at is not null from {{schema}}.queue_settings s where s.queue = q.queue), false),
           greatest(coalesce((select a.n from avail a where a.queue = q.queue), 0), 0)
             + (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'available'),
           coalesce((select r.running from receipts r where r.queue = q.queue), 0),
           (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'waiting_external'),
           (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'scheduled'),
           (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'retryable'),
           coalesce((select r.completed from receipts r where r.queue = q.queue), 0)
             + coalesce((select t.n from tallied t where t.queue = q.queue), 0)
             + coalesce((select h.n from history h where h.queue = q.queue), 0)
             + (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'completed'),
           (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'failed'),
           (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'cancelled'),
           (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'dlq'),
           (select count(*) from {{schema}}.off_ring_jobs o where o.queue = q.queue and o.state = 'blocked')
      from q order by q.queue;
end
$$;

-- Where job p_id stands now, read in one snapshot: terminal tables first, then the backlog, then the ring
-- (waiting, running or completed by its receipt), then compact completed history. No row when it never
-- existed or its history passed retention. attempt = attempts started so far. claimed_at and claimed_by come
-- from the attempt's receipt (its claim batch: when, and which runtime instance), so only a job the ring
-- still holds a receipt for (running, or completed in the ring) has them; claimed_host and claimed_pid are
-- that instance's registration, null once it is gone.
create function {{schema}}.job_state(p_id bigint)
  returns table (state text, kind text, queue text, priority smallint, args jsonb, attempt int, max_attempts int,
                 run_lease bigint, run_at timestamptz, finished_at timestamptz, meta jsonb, claimed_at timestamptz,
                 claimed_by text, claimed_host text, claimed_pid int)
  language plpgsql stable
  set jit = off
  as $$
declare
  r {{schema}}.ready_entries;
  v_outcome text;
  v_claimed boolean;
  v_claimed_at timestamptz;
  v_claimed_by text;
begin
  -- Off the ring (one table holds each of these states, off_ring_jobs says which): its newest row.
  return query
    select o.state, o.kind, o.queue, o.priority, o.args, o.attempt, o.max_attempts, o.run_lease, o.due_at,
           o.finished_at, o.meta, null::timestamptz, null::text, null::text, null::int
      from {{schema}}.off_ring_jobs o where o.job_id = p_id order by o.run_lease desc limit 1;
  if found then return; end if;
  -- A job cancelled while available and then retried has two rows at one run lease: the cancelled one is older.
  select * into r from {{schema}}.ready_entries re where re.job_id = p_id
   order by re.run_lease desc,
            exists (select 1 from {{schema}}.ready_tombstones t
                     where t.slot = re.slot and t.lane_id = re.lane_id and t.lane_seq = re.lane_seq)
   limit 1;
  if found then
    select true, (select c.outcome from {{schema}}.closure_batches c
                   where c.slot = b.slot and c.batch_id = b.batch_id and c.idxs @> m.idx limit 1),
           b.claimed_at, b.instance_id
      into v_claimed, v_outcome, v_claimed_at, v_claimed_by
      from {{schema}}.claim_batches b
      cross join lateral {{schema}}.receipt_members(b.slot, b.batch_id) m
     where b.lane_id = r.lane_id and b.first_seq <= r.lane_seq and b.last_seq >= r.lane_seq
       and m.lane_seq = r.lane_seq and m.run_lease = r.run_lease + 1
     limit 1;
    if not coalesce(v_claimed, false) then
      return query select 'available'::text, r.kind, r.queue, r.priority, r.args, r.attempt::int,
                          r.max_attempts::int, r.run_lease, null::timestamptz, null::timestamptz, r.meta,
                          null::timestamptz, null::text, null::text, null::int;
      return;
    end if;
    if v_outcome is null or v_outcome = 'completed' then
      return query select case when v_outcome is null then 'running' else 'completed' end, r.kind, r.queue,
                          r.priority, r.args, r.attempt + 1, r.max_attempts::int, r.run_lease + 1,
                          null::timestamptz, null::timestamptz, r.meta, v_claimed_at, v_claimed_by,
                          ri.hostname, ri.pid
                     from (select 1) one
                     left join {{schema}}.runtime_instances ri on ri.instance_id = v_claimed_by;
      return;
    end if;
  end if;
  return query
    select 'completed'::text, null::text, l.queue, l.priority, null::jsonb, h.attempt::int, null::int, h.run_lease,
           null::timestamptz, h.closed_at, null::jsonb, null::timestamptz, null::text, null::text, null::int
      from {{schema}}.completed_history h join {{schema}}.lanes l on l.lane_id = h.lane_id
     where h.ids @> p_id
     limit 1;
end
$$;

-- The ring at a glance: one row per slot that holds rows (and the current one), oldest first; for the oldest
-- sealed slot, what keeps prune from truncating it and which queues it belongs to. Row counts are the
-- statistics collector's estimates, not a scan; its unclaimed rows are counted up to 10,000 (unclaimed_more:
-- there are more than that).
create function {{schema}}.ring_status()
  returns table (slot smallint, role text, generation bigint, ready_rows bigint, receipts bigint,
                 pinned_by text, unclaimed bigint, unclaimed_more boolean, open_receipts bigint, queues text[])
  language plpgsql stable
  set jit = off
  as $$
declare
  v_cur smallint := {{schema}}.current_slot();
  v_gen bigint := (select max(g.generation) from {{schema}}.ring_rotations g);
  v_oldest smallint := {{schema}}.oldest_sealed_slot();
  v_live record;
  v_s smallint;
  i int;
begin
  for i in 1..16 loop
    v_s := ((v_cur + i) % 16)::smallint;
    continue when v_s <> v_cur and not {{schema}}.slot_has_rows(v_s);
    slot := v_s;
    role := case when v_s = v_cur then 'current' else 'sealed' end;
    generation := v_gen - (v_cur - v_s + 16) % 16;
    ready_rows := (select coalesce(s.n_live_tup, 0) from pg_stat_user_tables s
                    where s.relid = to_regclass('{{schema}}.ready_entries_' || v_s));
    receipts := (select coalesce(s.n_live_tup, 0) from pg_stat_user_tables s
                  where s.relid = to_regclass('{{schema}}.claim_batches_' || v_s));
    pinned_by := null; unclaimed := null; unclaimed_more := null; open_receipts := null; queues := null;
    if v_s = v_oldest then
      select * into v_live from {{schema}}.slot_live(v_s, 10000, true);
      pinned_by := v_live.reason;
      unclaimed := least(v_live.unclaimed, 10000);
      unclaimed_more := v_live.unclaimed > 10000;
      open_receipts := v_live.receipts;
      queues := array(select q from {{schema}}.slot_holding_queues(v_s) q order by 1);
    end if;
    return next;
  end loop;
end
$$;
