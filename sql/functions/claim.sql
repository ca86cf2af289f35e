-- Claiming. A claim call takes up to p_max jobs of a queue and appends one receipt (claim_batches row) per
-- lane and ready slot it read, committed before any handler runs. Lanes are taken in aged-priority order (a
-- job's effective priority improves by one level per p_aging_secs of waiting, computed here, nothing
-- rewritten), each under a try-lock, so concurrent claimers skip a busy lane instead of queueing on it. A
-- claim never waits on a producer (producers hold no lock a claim needs); it waits, for at most p_wait_ms,
-- on another claimer only when every lane with work is held by one (see claim()).
--
-- Per lane: heal the high-water and floor from committed receipts; claim rows that committed late into open
-- gaps (they are the oldest); then claim fresh rows above the high-water in lane order. Jobs come back as one
-- JSON array per receipt (member i is element i): one text value to parse instead of hundreds of rows.
--
-- A call made only for its effect is assigned (v_set := setval(...)), and a row-returning helper is assigned
-- to a record, rather than run as PERFORM or SELECT INTO: PL/pgSQL evaluates a lone call directly, where a
-- statement starts an executor of its own (a tenth of a one-job claim's server time).

-- What a handler needs of a claimed row, as one JSON array (see src/storage/claim.ts for the order). Times are
-- whole microseconds since the epoch. It takes the row's columns, not the row: a whole-row value is built
-- (and converted from the partition's row type) for every row, then taken apart again field by field; and
-- an integer prints in a fraction of the time a double does. Both together took a third off building a
-- claim's JSON, most of a claim's server time per job.
create function {{schema}}.claimed_json(p_job_id bigint, p_kind text, p_args jsonb, p_attempt smallint,
    p_max_attempts smallint, p_run_lease bigint, p_priority smallint, p_enqueued_at timestamptz,
    p_ready_at timestamptz, p_meta jsonb) returns json
  language sql stable
  as $$
    select json_build_array(p_job_id::text, p_kind, p_args, p_attempt + 1, p_max_attempts, p_run_lease + 1,
                            p_priority, (date_part('epoch', p_enqueued_at) * 1000000)::int8,
                            (date_part('epoch', p_ready_at) * 1000000)::int8, p_meta)
  $$;

-- Appends one receipt. Members are the taken rows in lane order: member i is the row at first_seq + i - 1
-- when the range holds nothing else, otherwise lane_seqs[i]; run leases likewise (lease when uniform). The
-- receipt goes to the slot that is current now, read after its rows were: a row's producer read its slot
-- before it committed, so the receipt's slot is never older than the rows it reads, and truncating a slot
-- never takes a receipt whose rows stay behind (see prune()).
create function {{schema}}.record_receipt(p_lane_id int, p_ready_slot smallint,
    p_first bigint, p_last bigint, p_seqs bigint[], p_leases bigint[], p_gaps int8multirange,
    p_gap_horizon bigint, p_instance text, p_deadline_secs int, out batch_id bigint, out claim_slot smallint)
  language plpgsql
  as $$
declare
  v_n int := coalesce(cardinality(p_seqs), 0);
  v_uniform boolean := v_n > 0 and p_leases = array_fill(p_leases[1], array[v_n]);
begin
  batch_id := nextval('{{schema}}.claim_batch_seq');
  select r.slot into claim_slot from {{schema}}.ring_rotations r order by r.generation desc limit 1;
  insert into {{schema}}.claim_batches
    (slot, batch_id, lane_id, ready_slot, first_seq, last_seq, size, lease, lane_seqs, run_leases,
     instance_id, deadline_at, gaps, gap_horizon)
  values (claim_slot, batch_id, p_lane_id, p_ready_slot, p_first, p_last, v_n,
          case when v_uniform then p_leases[1] end,
          case when p_last - p_first + 1 <> v_n then p_seqs end,
          case when not v_uniform and v_n > 0 then p_leases end,
          p_instance,
          case when p_deadline_secs > 0 then now() + make_interval(secs => p_deadline_secs) end,
          p_gaps, p_gap_horizon);
end
$$;

-- Brings a lane's high-water and floor up to the committed evidence and returns them, with the ring's current
-- slot as lane_high() read it. Caller holds the lane's claim lock. When the floor had caught up with the
-- high-water and no newer receipt recorded gaps, the floor follows the high-water at once (the common case: no
-- gaps at all). Otherwise the open gaps are examined: a gap whose producer has provably ended and that shows no
-- row is dead.
create function {{schema}}.heal_lane(p_lane {{schema}}.lanes, out high bigint, out lane_floor bigint,
    out open_gaps int8multirange, out ring_slot smallint)
  language plpgsql
  as $$
declare
  v_cached_high bigint := coalesce(pg_sequence_last_value(p_lane.claim_seq), 0);
  v_gapped boolean;
  v_xmin bigint;
  v_visible int8multirange;
  v_cancelled int8multirange;
  v_unresolved int8multirange;
  v_producers bigint := 0;
  v_high record;
  v_set bigint;
begin
  lane_floor := coalesce(pg_sequence_last_value(p_lane.floor_seq), 0);
  v_high := {{schema}}.lane_high(p_lane);
  high := v_high.high;
  v_gapped := v_high.gapped;
  ring_slot := v_high.slot;
  if high > v_cached_high then
    v_set := setval(p_lane.claim_seq, high, true);
  end if;
  -- After the high-water, the ring generation lane_high() read before the receipts: every receipt above the
  -- new high-water is written after that read (this claim holds the lane's claim lock, and prune's carries
  -- copy receipts already counted), so in that generation or a later one.
  if v_high.generation > coalesce(pg_sequence_last_value(p_lane.receipt_gen_seq), 0) then
    v_set := setval(p_lane.receipt_gen_seq, v_high.generation, true);
  end if;
  open_gaps := '{}';
  if lane_floor >= v_cached_high and not v_gapped then
    if high > lane_floor then
      v_set := setval(p_lane.floor_seq, high, true);
      lane_floor := high;
    end if;
    return;
  end if;
  open_gaps := {{schema}}.lane_open(p_lane.lane_id, lane_floor, high);
  if isempty(open_gaps) then
    v_set := setval(p_lane.floor_seq, high, true);
    lane_floor := high;
    return;
  end if;
  -- Two proofs that a gap's producer has ended; either suffices. (1) The lane's producers still in flight
  -- are all newer than its horizon: read first, so the visibility read below sees any of them that ended.
  -- Under a stricter isolation level that read would share the snapshot, so only (2) counts there: every
  -- transaction older than the horizon has ended, read in the same snapshot as the rows.
  if current_setting('transaction_isolation') = 'read committed' then
    v_producers := {{schema}}.lane_producers(p_lane.lane_id);
  end if;
  select pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
         -- Each gap range read through the index (OFFSET 0 keeps the lateral read from being flattened
         -- into a scan of the whole lane).
         coalesce((select range_agg(int8range(r.lane_seq, r.lane_seq + 1))
                     from unnest(open_gaps) g
                     cross join lateral (
                       select r.lane_seq from {{schema}}.ready_entries r
                        where r.lane_id = p_lane.lane_id and r.lane_seq >= lower(g) and r.lane_seq < upper(g)
                       offset 0) r),
                  '{}'::int8multirange),
         coalesce((select range_agg(int8range(t.lane_seq, t.lane_seq + 1))
                     from unnest(open_gaps) g
                     cross join lateral (
                       select t.lane_seq from {{schema}}.ready_tombstones t
                        where t.lane_id = p_lane.lane_id and t.lane_seq >= lower(g) and t.lane_seq < upper(g)
                       offset 0) t),
                  '{}'::int8multirange)
    into v_xmin, v_visible, v_cancelled;
  -- Not yet resolved: invisible positions whose owners may still commit, and visible rows not yet claimed.
  v_unresolved := ((open_gaps - {{schema}}.lane_settled(p_lane.lane_id, lane_floor, greatest(v_xmin, v_producers)))
                   - v_visible)
                + (v_visible - v_cancelled);
  if isempty(v_unresolved) then
    v_set := setval(p_lane.floor_seq, high, true);
    lane_floor := high;
    open_gaps := '{}';
  elsif lower(v_unresolved) - 1 > lane_floor then
    lane_floor := lower(v_unresolved) - 1;
    v_set := setval(p_lane.floor_seq, lane_floor, true);
    open_gaps := open_gaps * int8multirange(int8range(lane_floor + 1, high + 1));
  end if;
end
$$;

-- Claims rows that committed late into open gaps of a lane (a producer that held its transaction open while
-- later jobs were claimed). One receipt per gap run and ready slot, so a receipt's range never spans positions
-- another receipt covers; its gaps name every position of its range it did not take. Returns the receipts.
create function {{schema}}.claim_gap_rows(p_lane {{schema}}.lanes, p_open int8multirange, p_max int,
    p_instance text, p_deadline_secs int)
  returns table (batch_id bigint, claim_slot smallint, n int, jobs json)
  language plpgsql
  as $$
declare
  g record;
begin
  for g in
    select x.run, x.slot, min(x.lane_seq) as first_seq, max(x.lane_seq) as last_seq,
           array_agg(x.lane_seq order by x.lane_seq) as seqs,
           array_agg(x.run_lease + 1 order by x.lane_seq) as leases,
           json_agg({{schema}}.claimed_json(x.job_id, x.kind, x.args, x.attempt, x.max_attempts, x.run_lease,
                                            x.priority, x.enqueued_at, x.ready_at, x.meta) order by x.lane_seq) as jobs
      from (select run, r.*, row_number() over (order by r.lane_seq) as k
              from unnest(p_open) run
              -- Per gap run, through the index (the LIMIT keeps the planner from flattening this into a
              -- scan of every row of the lane, filtered afterwards: slow as the ready slot fills).
              cross join lateral (
                select r.slot, r.lane_seq, r.job_id, r.kind, r.args, r.attempt, r.max_attempts, r.run_lease,
                       r.priority, r.enqueued_at, r.ready_at, r.meta
                  from {{schema}}.ready_entries r
                 where r.lane_id = p_lane.lane_id and r.lane_seq >= lower(run) and r.lane_seq < upper(run)
                   and not exists (select 1 from {{schema}}.ready_tombstones t
                                    where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)
                 order by r.lane_seq
                 limit p_max) r) x
     where x.k <= p_max
     group by x.run, x.slot
     order by min(x.lane_seq)
  loop
    select * into batch_id, claim_slot from {{schema}}.record_receipt(p_lane.lane_id, g.slot, g.first_seq,
      g.last_seq, g.seqs, g.leases,
      int8multirange(int8range(g.first_seq, g.last_seq + 1))
        - (select range_agg(int8range(s, s + 1)) from unnest(g.seqs) s),
      null, p_instance, p_deadline_secs);
    n := cardinality(g.seqs);
    jobs := g.jobs;
    return next;
  end loop;
end
$$;

-- Positions above the high-water with no visible row: producers still in flight or rolled back. An empty
-- receipt passes them, all gaps, so the high-water stops counting them as available and the gaps resolve
-- like any others (a late commit is claimed as a gap row; an ended producer's gap dies). The lane's last
-- position is read first and the gap horizon (lane_gap_horizon()) after it, so the horizon covers every
-- producer of a position up to it. Only positions an earlier claim already found taken (at or below the
-- drained mark) are passed: a producer that is merely committing right now shows up to the next claim as a
-- fresh row, which costs far less to claim than a gap row. Returns null when a row is visible after all, or
-- nothing is old enough to pass.
create function {{schema}}.pass_empty_tail(p_lane {{schema}}.lanes, p_high bigint, p_instance text,
    out batch_id bigint, out claim_slot smallint)
  language plpgsql
  as $$
declare
  v_last bigint := least(pg_sequence_last_value(p_lane.drained_seq), pg_sequence_last_value(p_lane.enqueue_seq));
  v_horizon bigint;
begin
  if v_last <= p_high then
    return;
  end if;
  if exists (select 1 from {{schema}}.ready_entries r
              where r.lane_id = p_lane.lane_id and r.lane_seq > p_high and r.lane_seq <= v_last) then
    return;
  end if;
  v_horizon := {{schema}}.lane_gap_horizon(p_lane.lane_id);
  select * into batch_id, claim_slot from {{schema}}.record_receipt(p_lane.lane_id,
    (select r.slot from {{schema}}.ring_rotations r order by r.generation desc limit 1), p_high + 1, v_last,
    null, null, int8multirange(int8range(p_high + 1, v_last + 1)), v_horizon, p_instance, 0);
end
$$;

-- Claims fresh rows of a lane: those above its high-water, in lane order, from the ready slot that holds the
-- next one. The receipt's range starts right above the high-water, so every position up to its last row is
-- accounted for; positions it did not see (producers in flight or rolled back, rows of another slot) are its
-- gaps, recorded with the horizon read after the rows were seen (lane_gap_horizon()). A range of
-- cancelled rows only still gets its (empty) receipt: that is what moves the high-water past them. At most one
-- receipt, so one record (all null when there was nothing to claim), not a set: the caller assigns it.
-- p_current: the ring's current slot as the caller last read it (a hint: see below).
create function {{schema}}.claim_fresh_rows(p_lane {{schema}}.lanes, p_high bigint, p_current smallint, p_max int,
    p_instance text, p_deadline_secs int, out batch_id bigint, out claim_slot smallint, out n int, out jobs json)
  language plpgsql
  as $$
declare
  v_head_slot smallint;
  v_has_tombstones boolean;
  v_last bigint;
  v_seen bigint[];
  v_seqs bigint[];
  v_leases bigint[];
  v_jobs json;
  v_gaps int8multirange;
  v_horizon bigint;
  v_receipt record;
begin
  -- The next position is nearly always a row of the current slot, where producers write: one probe of that
  -- partition finds it. Only when it does not (a gap, a backlog older than the last rotation) are all the
  -- ring's partitions probed for the lowest row above the high-water.
  -- (The slot comes from the heal's read of the ring, a moment ago: as a parameter it prunes the other
  -- partitions from the plan, which a subquery in the same statement does not. Should the ring have turned
  -- since, the probe finds nothing there and the wider one runs.)
  select r.slot into v_head_slot from {{schema}}.ready_entries r
   where r.slot = p_current and r.lane_id = p_lane.lane_id and r.lane_seq = p_high + 1;
  if v_head_slot is null then
    select r.slot into v_head_slot from {{schema}}.ready_entries r
     where r.lane_id = p_lane.lane_id and r.lane_seq > p_high
     order by r.lane_seq limit 1;
  end if;
  if v_head_slot is null then
    select * into batch_id, claim_slot from {{schema}}.pass_empty_tail(p_lane, p_high, p_instance);
    if batch_id is not null then
      n := 0;
    end if;
    return;
  end if;
  v_has_tombstones := exists (select 1 from {{schema}}.ready_tombstones t
                               where t.slot = v_head_slot and t.lane_id = p_lane.lane_id and t.lane_seq > p_high);
  -- The subquery's order feeds the aggregates in lane order.
  select max(r.lane_seq), array_agg(r.lane_seq),
         array_agg(r.lane_seq) filter (where not r.dead),
         array_agg(r.run_lease + 1) filter (where not r.dead),
         json_agg({{schema}}.claimed_json(r.job_id, r.kind, r.args, r.attempt, r.max_attempts, r.run_lease,
                                          r.priority, r.enqueued_at, r.ready_at, r.meta)) filter (where not r.dead)
    into v_last, v_seen, v_seqs, v_leases, v_jobs
    from (select r.lane_seq, r.job_id, r.kind, r.args, r.attempt, r.max_attempts, r.run_lease, r.priority,
                 r.enqueued_at, r.ready_at, r.meta,
                 (v_has_tombstones and exists (
                   select 1 from {{schema}}.ready_tombstones t
                    where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)) as dead
            from {{schema}}.ready_entries r
           where r.slot = v_head_slot and r.lane_id = p_lane.lane_id and r.lane_seq > p_high
           order by r.lane_seq
           limit p_max) r;
  if v_last is null then
    return;
  end if;
  -- The gaps are what that one read did not see. (Not a second read of the table: under READ COMMITTED it
  -- would see rows committed since, and count positions as covered that this receipt never returned.)
  if cardinality(v_seen) <> v_last - p_high then
    select int8multirange(int8range(p_high + 1, v_last + 1)) - range_agg(int8range(s, s + 1))
      into v_gaps
      from unnest(v_seen) s;
    v_horizon := {{schema}}.lane_gap_horizon(p_lane.lane_id);
  end if;
  v_receipt := {{schema}}.record_receipt(p_lane.lane_id, v_head_slot, p_high + 1, v_last, v_seqs, v_leases, v_gaps,
    v_horizon, p_instance, p_deadline_secs);
  batch_id := v_receipt.batch_id;
  claim_slot := v_receipt.claim_slot;
  n := coalesce(cardinality(v_seqs), 0);
  jobs := v_jobs;
end
$$;

-- Claims up to p_max jobs of one lane whose claim lock the caller holds: heal its high-water and floor, take
-- rows that committed late into open gaps (the oldest), then fresh rows above the high-water.
create function {{schema}}.claim_lane(p_lane {{schema}}.lanes, p_max int, p_instance text, p_deadline_secs int)
  returns table (batch_id bigint, claim_slot smallint, n int, jobs json)
  language plpgsql
  as $$
declare
  v_left int := p_max;
  v_heal record;
  v_last bigint := pg_sequence_last_value(p_lane.enqueue_seq);
  b record;
begin
  v_heal := {{schema}}.heal_lane(p_lane);
  if not isempty(v_heal.open_gaps) then
    for b in select * from {{schema}}.claim_gap_rows(p_lane, v_heal.open_gaps, v_left, p_instance, p_deadline_secs) loop
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      n := b.n;
      jobs := b.jobs;
      return next;
    end loop;
  end if;
  if v_left <= 0 then
    return;
  end if;
  b := {{schema}}.claim_fresh_rows(p_lane, v_heal.high, v_heal.ring_slot, v_left, p_instance, p_deadline_secs);
  if b.n > 0 then
    v_left := v_left - b.n;
    batch_id := b.batch_id;
    claim_slot := b.claim_slot;
    n := b.n;
    jobs := b.jobs;
    return next;
  end if;
  -- Fewer than asked: the lane was drained up to its last position when this claim began, so a producer
  -- after it wakes the hosts at once (reserve_lane()). A hint, not evidence: a claim that rolls back leaves
  -- it early, which costs one wake-up.
  if v_left > 0 and v_last > pg_sequence_last_value(p_lane.drained_seq) then
    v_last := setval(p_lane.drained_seq, v_last, true);
  end if;
end
$$;

-- Waits up to p_wait_ms for a lane's claim lock (another claimer's claim takes a few milliseconds). True
-- when this transaction now holds it. A claim lock is otherwise held only by cancel, for one statement.
create function {{schema}}.wait_for_lane(p_lane_id int, p_wait_ms int) returns boolean
  language plpgsql
  as $$
declare
  v_lock_timeout text := current_setting('lock_timeout');
begin
  perform set_config('lock_timeout', p_wait_ms || 'ms', true);
  begin
    -- Taken in this block's subtransaction; when the block ends normally the lock passes to the
    -- transaction and is held to its end like a try-lock's.
    perform pg_advisory_xact_lock({{schema}}.lock_ns('claim'), p_lane_id);
  exception when lock_not_available then
    perform set_config('lock_timeout', v_lock_timeout, true);
    return false;
  end;
  perform set_config('lock_timeout', v_lock_timeout, true);
  return true;
end
$$;

-- Lanes are taken in aged-priority order, each under a try-lock: a lane another claimer holds is skipped.
-- When every lane with work was held and this call holds none, it waits (briefly) for the first of them
-- instead of coming back empty: hosts sharing a queue then take turns on its lane as each claim ends, not
-- after a sleep. Waiting only while holding no lane lock means a waiter can never close a cycle.
-- Generic plans, for this call and every function it calls: a statement over the ring's partitions whose
-- parameters pick one partition (a slot) costs more as a generic plan on paper (every partition is in it,
-- pruned only when it runs), so PostgreSQL kept a custom plan and planned it over sixteen partitions on every
-- call. One claim of one job, one connection: 0.92 ms with custom plans, 0.69 ms generic.
create function {{schema}}.claim(p_queue text, p_max int, p_instance text, p_aging_secs int, p_deadline_secs int,
    p_wait_ms int)
  returns table (batch_id bigint, claim_slot smallint, jobs json)
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  as $$
declare
  v_lanes {{schema}}.lanes[];
  v_lane {{schema}}.lanes;
  v_first_busy {{schema}}.lanes;
  v_left int := p_max;
  v_busy int := 0;
  v_locked boolean := false;
  b record;
begin
  -- Lanes with work, each lane's cursors read once, in priority order (ties in random order, so claimers of a
  -- sharded queue start on different shards); none while the queue is paused.
  v_lanes := array(
    select l
      from {{schema}}.lanes l
      cross join lateral (select coalesce(pg_sequence_last_value(l.claim_seq), 0) as high,
                                 coalesce(pg_sequence_last_value(l.floor_seq), 0) as floor) c
     where l.queue = p_queue
       and (coalesce(pg_sequence_last_value(l.enqueue_seq), 0) > c.high or c.floor < c.high)
       and not exists (select 1 from {{schema}}.queue_settings q where q.queue = p_queue and q.paused_at is not null)
     order by l.priority, random());
  -- Aging can only reorder lanes of different priorities, and only then are their heads read (each a probe of
  -- every ring partition). A separate statement, not a join made conditional: a generic plan sets up the
  -- head probe's sixteen index scans whether or not it runs them, which cost about as much as the rest of the
  -- lane choice.
  if v_lanes[1].priority <> v_lanes[cardinality(v_lanes)].priority then
    v_lanes := array(
      select w
        from unnest(v_lanes) w
        left join lateral (
          select r.ready_at from {{schema}}.ready_entries r
           where r.lane_id = w.lane_id and r.lane_seq > coalesce(pg_sequence_last_value(w.claim_seq), 0)
           order by r.lane_seq limit 1) h on true
       order by greatest(1, w.priority - coalesce(floor(extract(epoch from now() - h.ready_at) / p_aging_secs), 0)),
                h.ready_at nulls last, random());
  end if;
  foreach v_lane in array v_lanes
  loop
    exit when v_left <= 0;
    if not pg_try_advisory_xact_lock({{schema}}.lock_ns('claim'), v_lane.lane_id) then
      v_busy := v_busy + 1;
      if v_busy = 1 then
        v_first_busy := v_lane;
      end if;
      continue;
    end if;
    v_locked := true;
    for b in select * from {{schema}}.claim_lane(v_lane, v_left, p_instance, p_deadline_secs) loop
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := b.jobs;
      return next;
    end loop;
  end loop;
  if v_busy > 0 and not v_locked and {{schema}}.wait_for_lane(v_first_busy.lane_id, p_wait_ms) then
    v_busy := v_busy - 1;
    for b in select * from {{schema}}.claim_lane(v_first_busy, v_left, p_instance, p_deadline_secs) loop
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := b.jobs;
      return next;
    end loop;
  end if;
  -- A lane with work that another claimer still held: say so (a row with no batch), so the caller tries
  -- again soon instead of taking "fewer than asked" for "nothing left".
  if v_busy > 0 and v_left > 0 then
    batch_id := null;
    claim_slot := null;
    jobs := null;
    return next;
  end if;
end
$$;
