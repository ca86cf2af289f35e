-- Ring maintenance, run by the maintenance leader. Rotation appends to the ring ledger; prune truncates the
-- oldest sealed slot once nothing in it is live, after carrying forward the few live things a straggler left
-- there (an unclaimed job of a queue nobody serves, a long attempt's receipt). TRUNCATE reclaims space even
-- while a long transaction pins the MVCC horizon; nothing here waits on anyone (try-locks and a short
-- lock_timeout).

create function {{schema}}.ring_tables() returns text[]
  language sql immutable
  as $$ select array['ready_entries', 'ready_tombstones', 'claim_batches', 'closure_batches'] $$;

-- PL/pgSQL with a generic plan: as a SQL function it was planned again on every call, over every partition of
-- four tables, and oldest_sealed_slot() calls it up to fifteen times on each prune tick and queue-health read
-- (1.3 ms against 0.5 on an idle ring).
create function {{schema}}.slot_has_rows(p_slot smallint) returns boolean
  language plpgsql stable
  set plan_cache_mode = force_generic_plan
  as $$
begin
  return exists (select 1 from {{schema}}.ready_entries where slot = p_slot)
      or exists (select 1 from {{schema}}.claim_batches where slot = p_slot)
      or exists (select 1 from {{schema}}.closure_batches where slot = p_slot)
      or exists (select 1 from {{schema}}.ready_tombstones where slot = p_slot);
end
$$;

-- Appends a rotation to the ledger when the current slot has rows and the next one is empty, and (with
-- p_min_rows > 0) holds at least p_min_rows ready rows or is older than p_max_age_ms. Every rotation is later
-- a prune, whose truncate makes the claims of that moment wait a few milliseconds: a ring that turns once a
-- second puts that wait into 1 % of the jobs of a queue taking 100 per second; turning by size or age keeps
-- it rare at low rates and changes nothing at high ones. Returns the new current slot, or null when it
-- skipped (idle ring, small young slot, busy incoming slot, or another rotator).
create function {{schema}}.rotate(p_min_rows int default 0, p_max_age_ms int default 0) returns smallint
  language plpgsql
  set jit = off
  as $$
declare
  v_gen bigint;
  v_slot smallint;
  v_next smallint;
  v_rotated_at timestamptz;
begin
  if not pg_try_advisory_xact_lock({{schema}}.lock_ns('ring'), 0) then
    return null;
  end if;
  select generation, slot, rotated_at into v_gen, v_slot, v_rotated_at
    from {{schema}}.ring_rotations order by generation desc limit 1;
  if not exists (select 1 from {{schema}}.ready_entries where slot = v_slot)
     and not exists (select 1 from {{schema}}.claim_batches where slot = v_slot) then
    return null;
  end if;
  if p_min_rows > 0 and clock_timestamp() - v_rotated_at < make_interval(secs => p_max_age_ms / 1000.0)
     and (select count(*) from (select 1 from {{schema}}.ready_entries r where r.slot = v_slot limit p_min_rows) x)
         < p_min_rows then
    return null;
  end if;
  v_next := (v_slot + 1) % 16;
  if {{schema}}.slot_has_rows(v_next) then
    return null;
  end if;
  insert into {{schema}}.ring_rotations (generation, slot) values (v_gen + 1, v_next);
  -- The incoming slot starts its turn untallied (prune dropped its tally when it truncated it; this also
  -- covers a slot emptied some other way).
  perform {{schema}}.forget_tallies(v_next);
  -- The ledger is append-only on the hot path; trimming its far past here is one small delete per
  -- rotation, off the claim/complete loop.
  delete from {{schema}}.ring_rotations where generation < v_gen - 64;
  return v_next;
end
$$;

-- The oldest sealed slot that still has rows, or null when only the current slot does.
create function {{schema}}.oldest_sealed_slot() returns smallint
  language plpgsql stable
  as $$
declare
  v_cur smallint := {{schema}}.current_slot();
  v_s smallint;
begin
  for i in 1..15 loop
    v_s := ((v_cur + i) % 16)::smallint;
    if {{schema}}.slot_has_rows(v_s) then
      return v_s;
    end if;
  end loop;
  return null;
end
$$;

-- Ready rows of a slot that no receipt covers and no tombstone cancelled: above their lane's claimed
-- high-water, or in one of its open gaps. At most p_limit of them. Each span (the run above the high-water, each
-- open gap) is its own range scan of the lane's rows: one condition "above the high-water or in a gap" is not
-- an index range, and read every row the slot holds for the lane (25 ms for a spent slot of 200,000 rows, which
-- prune asks about twice, under the ring lock the second time). No JIT: a plan over every lane and partition looks
-- costly on paper, and compiling it took longer than running it. p_lane_id: only that lane's (null: every lane's).
create function {{schema}}.slot_unclaimed(p_slot smallint, p_limit int, p_lane_id int default null)
  returns table (lane_id int, lane_seq bigint)
  language sql stable
  set jit = off
  as $$
    select r.lane_id, r.lane_seq
      from {{schema}}.lanes l
      cross join lateral {{schema}}.lane_unclaimed_spans(l) span
      cross join lateral (
        select r.lane_id, r.lane_seq from {{schema}}.ready_entries r
         where r.slot = p_slot and r.lane_id = l.lane_id
           and r.lane_seq >= span.lo and r.lane_seq < span.hi
           and not exists (select 1 from {{schema}}.ready_tombstones t
                            where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)
         limit p_limit) r
     where p_lane_id is null or l.lane_id = p_lane_id
     limit p_limit
  $$;

-- The queues that hold slot p_slot: those with a ready row there that no receipt covers (one probe per lane and
-- span, not a capped sample of rows, which named whichever queue's rows came first) or a receipt there still
-- open. What an operator needs to know about a slot prune cannot truncate (an operator read: tallied slots,
-- whose receipts are all settled, are not read).
create function {{schema}}.slot_holding_queues(p_slot smallint) returns setof text
  language sql stable
  set jit = off
  as $$
    select l.queue
      from {{schema}}.lanes l
     where exists (select 1 from {{schema}}.slot_unclaimed(p_slot, 1, l.lane_id))
    union
    select l.queue
      from {{schema}}.slot_open_receipts(p_slot, true) o
      join {{schema}}.claim_batches b on b.slot = o.slot and b.batch_id = o.batch_id
      join {{schema}}.lanes l on l.lane_id = b.lane_id
  $$;

-- Receipts that live in slot p_slot or read its rows, with how many of their members no closure names yet.
-- Per slot holding such receipts (a receipt never lives in an older slot than the rows it reads, so there
-- are few), that slot's closures are summed in one pass: prune asks this under the ring lock, where a
-- per-receipt probe of the closures cost tens of ms on a slot of a few thousand receipts. The join must be a
-- hash join: ring partitions are truncated, not vacuumed, so their statistics (if any) say "a few rows", and
-- a nested loop re-reading the aggregate per receipt took seconds. p_skip_tallied: leave out the receipts of
-- tallied slots (all settled, see tally_slots()); for operator reads only, prune never trusts a tally.
create function {{schema}}.slot_receipts(p_slot smallint, p_skip_tallied boolean default false)
  returns table (slot smallint, batch_id bigint, ready_slot smallint, lane_id int, first_seq bigint,
                 listed boolean, open_members bigint)
  language plpgsql stable
  set enable_nestloop = off
  as $$
declare
  v_slot smallint;
  v_slots smallint[] := case when p_skip_tallied then {{schema}}.untallied_slots()
                             else array(select generate_series(0, 15)::smallint) end;
begin
  for v_slot in select distinct b.slot from {{schema}}.claim_batches b
                 where (b.ready_slot = p_slot or b.slot = p_slot) and b.slot = any(v_slots) loop
    return query
      select b.slot, b.batch_id, b.ready_slot, b.lane_id, b.first_seq, b.lane_seqs is not null,
             b.size - coalesce(c.n, 0)
        from {{schema}}.claim_batches b
        left join (select c.batch_id, sum(c.n) as n from {{schema}}.closure_batches c
                    where c.slot = v_slot group by c.batch_id) c on c.batch_id = b.batch_id
       where b.slot = v_slot and (b.ready_slot = p_slot or b.slot = p_slot);
  end loop;
end
$$;

-- Receipts that are still open and either live in the slot or read its rows.
create function {{schema}}.slot_open_receipts(p_slot smallint, p_skip_tallied boolean default false)
  returns table (slot smallint, batch_id bigint, ready_slot smallint, open_members bigint)
  language sql stable
  as $$
    select o.slot, o.batch_id, o.ready_slot, o.open_members
      from {{schema}}.slot_receipts(p_slot, p_skip_tallied) o
     where o.open_members > 0
  $$;

-- What keeps a sealed slot from being truncated: counts of unclaimed rows (up to p_limit + 1) and open
-- receipts, and the reason in one word (null when the slot is spent). p_skip_tallied as in slot_receipts().
create function {{schema}}.slot_live(p_slot smallint, p_limit int, p_skip_tallied boolean default false,
    out unclaimed bigint, out receipts bigint, out members bigint, out reason text)
  language plpgsql stable
  as $$
begin
  select count(*) into unclaimed from {{schema}}.slot_unclaimed(p_slot, p_limit + 1);
  select count(*), coalesce(sum(o.open_members), 0) into receipts, members
    from {{schema}}.slot_open_receipts(p_slot, p_skip_tallied) o;
  reason := case when unclaimed > 0 then 'unclaimed_ready_rows' when receipts > 0 then 'open_receipts' end;
end
$$;

-- Moves what is still live in slot p_from into slot p_to, keeping lane positions, run leases and receipt ids,
-- so p_from can be truncated: unclaimed rows are copied; an open receipt that reads p_from or lives there moves
-- to p_to with its closures and the member rows it reads from p_from, leaving a forward so settlements that
-- name the slot it was claimed in still find it. Moving the receipt (rather than pointing it at p_to where it
-- is) keeps the ring's one ordering rule: a receipt never lives in an older slot than the rows it reads, so
-- when a slot is truncated every receipt reading it is either gone with it or already settled. The caller
-- holds ACCESS EXCLUSIVE on p_from's partitions, so no claim, settlement or producer is in there meanwhile.
-- Returns how many ready rows were copied.
create function {{schema}}.carry_forward(p_from smallint, p_to smallint) returns bigint
  language plpgsql
  as $$
declare
  v_rows bigint := 0;
  v_n bigint;
  b record;
begin
  insert into {{schema}}.ready_entries
    (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, attempt, max_attempts, run_lease,
     enqueued_at, ready_at, meta)
  select p_to, r.lane_id, r.lane_seq, r.job_id, r.kind, r.queue, r.priority, r.args, r.attempt, r.max_attempts,
         r.run_lease, r.enqueued_at, r.ready_at, r.meta
    from {{schema}}.slot_unclaimed(p_from, 2147483647) u
    join {{schema}}.ready_entries r on r.slot = p_from and r.lane_id = u.lane_id and r.lane_seq = u.lane_seq;
  get diagnostics v_rows = row_count;
  for b in select * from {{schema}}.slot_open_receipts(p_from) loop
    if b.ready_slot = p_from then
      insert into {{schema}}.ready_entries
        (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, attempt, max_attempts, run_lease,
         enqueued_at, ready_at, meta)
      select p_to, r.lane_id, r.lane_seq, r.job_id, r.kind, r.queue, r.priority, r.args, r.attempt,
             r.max_attempts, r.run_lease, r.enqueued_at, r.ready_at, r.meta
        from {{schema}}.receipt_members(b.slot, b.batch_id) m
        join {{schema}}.ready_entries r on r.slot = p_from and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq;
      get diagnostics v_n = row_count;
      v_rows := v_rows + v_n;
    end if;
    if b.slot = p_to then
      -- Already in the current slot (claimed there from an older slot's rows): it just reads p_to now.
      update {{schema}}.claim_batches c set ready_slot = p_to where c.slot = p_to and c.batch_id = b.batch_id;
      continue;
    end if;
    insert into {{schema}}.claim_batches
      (slot, batch_id, lane_id, ready_slot, first_seq, last_seq, size, lease, lane_seqs, run_leases,
       instance_id, claimed_at, deadline_at, gaps, gap_horizon)
    select p_to, c.batch_id, c.lane_id, case when c.ready_slot = p_from then p_to else c.ready_slot end,
           c.first_seq, c.last_seq, c.size, c.lease, c.lane_seqs, c.run_leases, c.instance_id, c.claimed_at,
           c.deadline_at, c.gaps, c.gap_horizon
      from {{schema}}.claim_batches c where c.slot = b.slot and c.batch_id = b.batch_id;
    insert into {{schema}}.closure_batches (slot, batch_id, idxs, n, outcome, closed_at)
    select p_to, c.batch_id, c.idxs, c.n, c.outcome, c.closed_at
      from {{schema}}.closure_batches c where c.slot = b.slot and c.batch_id = b.batch_id;
    if b.slot <> p_from then
      -- Its old slot is not being truncated: remove the original so the receipt exists once.
      delete from {{schema}}.closure_batches c where c.slot = b.slot and c.batch_id = b.batch_id;
      delete from {{schema}}.claim_batches c where c.slot = b.slot and c.batch_id = b.batch_id;
    end if;
    insert into {{schema}}.receipt_forwards (batch_id, slot) values (b.batch_id, p_to)
      on conflict (batch_id) do update set slot = excluded.slot;
    update {{schema}}.attempt_state set claim_slot = p_to where batch_id = b.batch_id;
  end loop;
  return v_rows;
end
$$;

-- What a lane still needs from the receipts of slot p_from once they are truncated, as empty receipts (no
-- members) in slot p_to: (1) the gaps they recorded that are still open (their producer may yet commit, and
-- its rows may be in a newer slot: a producer takes its positions before it reads its slot), with the
-- horizon that proves them dead; (2) the lane's claimed high-water, when no newer evidence holds it (the
-- cached claim_seq lags the receipts until the lane's next claim), taken only from receipts that cover their
-- last position (an earlier carry's gap receipt ends on an open position: a marker there would cover it). Without them the positions would read as
-- covered and their rows would never be claimed. The caller holds ACCESS EXCLUSIVE on p_from's partitions.
create function {{schema}}.carry_lane_evidence(p_from smallint, p_to smallint) returns void
  language plpgsql
  as $$
begin
  -- Each lane's open positions are read once (not once per receipt: this runs under the ring lock, and a
  -- slot of a busy lane with out-of-order producers holds hundreds of receipts with gaps).
  with lane_open as materialized (
    select l.lane_id, {{schema}}.lane_open(l.lane_id, coalesce(pg_sequence_last_value(l.floor_seq), 0),
                                           h.high) as open
      from {{schema}}.lanes l
      cross join lateral {{schema}}.lane_high(l) h
     where exists (select 1 from {{schema}}.claim_batches b
                    where b.slot = p_from and b.lane_id = l.lane_id and b.gaps is not null)
  )
  insert into {{schema}}.claim_batches
    (slot, batch_id, lane_id, ready_slot, first_seq, last_seq, size, instance_id, gaps, gap_horizon)
  select p_to, nextval('{{schema}}.claim_batch_seq'), b.lane_id, p_to, lower(o.open), upper(o.open) - 1, 0,
         'prune', o.open, b.gap_horizon
    from {{schema}}.claim_batches b
    join lane_open lo on lo.lane_id = b.lane_id
    cross join lateral (select b.gaps * lo.open as open) o
   where b.slot = p_from and b.gaps is not null and not isempty(o.open);
  insert into {{schema}}.claim_batches
    (slot, batch_id, lane_id, ready_slot, first_seq, last_seq, size, instance_id)
  select p_to, nextval('{{schema}}.claim_batch_seq'), x.lane_id, p_to, x.high, x.high, 0, 'prune'
    from (select b.lane_id, max(b.last_seq) as high from {{schema}}.claim_batches b
           where b.slot = p_from and (b.gaps is null or not b.gaps @> b.last_seq)
           group by b.lane_id) x
    join {{schema}}.lanes l on l.lane_id = x.lane_id
   where x.high > coalesce(pg_sequence_last_value(l.claim_seq), 0)
     and not exists (select 1 from {{schema}}.claim_batches n
                      where n.lane_id = x.lane_id and n.slot <> p_from and n.last_seq >= x.high);
end
$$;

-- Compact success history of the receipts that read slot p_slot and are fully settled (except those in p_skip,
-- kept already): one row per settle flush (per run of its member numbers, for a receipt with no member
-- list), attempt number and run lease, with the completed job ids as a multirange. Returns the receipts it kept.
create function {{schema}}.keep_completed_history(p_slot smallint, p_skip bigint[], out receipts bigint[])
  language plpgsql
  as $$
begin
  with done as materialized (
    select o.slot, o.batch_id, o.lane_id, o.first_seq, o.listed
      from {{schema}}.slot_receipts(p_slot) o
     where o.ready_slot = p_slot and o.open_members = 0
       -- A hashed set: prune's second pass skips thousands of receipts, and "<> all(array)" compares each
       -- receipt with every one of them (tens of ms under the ring lock).
       and o.batch_id not in (select unnest(p_skip))
  ), ranged as (
    -- A receipt that stored no member list took every position of its range, so each run of a closure is a
    -- range of lane positions, read by one index range scan. (Expanding every member and joining the slot's
    -- rows sorted all of them twice: a slot of 9.7M completions outlasted the leader's 30 s statement
    -- timeout on every try, so prune never got past it.)
    insert into {{schema}}.completed_history (lane_id, attempt, run_lease, ids, n, closed_at)
    select d.lane_id, x.attempt + 1, x.run_lease + 1, x.ids, x.n, c.closed_at
      from done d
      join {{schema}}.closure_batches c on c.slot = d.slot and c.batch_id = d.batch_id and c.outcome = 'completed'
      cross join lateral unnest(c.idxs) run
      cross join lateral (
        select r.attempt, r.run_lease, range_agg(int8range(r.job_id, r.job_id + 1)) as ids, count(*) as n
          from {{schema}}.ready_entries r
         where r.slot = p_slot and r.lane_id = d.lane_id
           and r.lane_seq >= d.first_seq + lower(run) - 1 and r.lane_seq < d.first_seq + upper(run) - 1
         group by r.attempt, r.run_lease) x
     where not d.listed
  ), listed as (
    -- A receipt with a member list: its completed members one by one.
    insert into {{schema}}.completed_history (lane_id, attempt, run_lease, ids, n, closed_at)
    select m.lane_id, r.attempt + 1, r.run_lease + 1, range_agg(int8range(r.job_id, r.job_id + 1)), count(*),
           m.closed_at
      from (select m.lane_id, c.slot, c.batch_id, c.closed_at, c.idxs, m.lane_seq
              from done d
              join {{schema}}.closure_batches c
                on c.slot = d.slot and c.batch_id = d.batch_id and c.outcome = 'completed'
              cross join lateral {{schema}}.receipt_members(d.slot, d.batch_id) m
             where d.listed and c.idxs @> m.idx) m
      join {{schema}}.ready_entries r on r.slot = p_slot and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq
     group by m.lane_id, r.attempt, r.run_lease, m.slot, m.batch_id, m.closed_at, m.idxs
  )
  select coalesce(array_agg(d.batch_id), '{}') into receipts from done d;
end
$$;

-- Truncates the oldest sealed slot once nothing in it is live. When a few things are (at most p_carry_limit
-- rows and receipt members) and the ring has at least p_carry_after live slots, they are carried forward into
-- the current slot first, so stragglers never stop the ring. Cheap check first, then ACCESS EXCLUSIVE on the
-- slot's partitions under a short lock_timeout (a claimer, settlement or producer in that slot wins; we retry
-- next tick), then the same check again under the locks, then carry, history, TRUNCATE.
--   outcome: pruned | carried | idle | busy | lock_busy | unclaimed_ready_rows | open_receipts
create function {{schema}}.prune(p_lock_timeout_ms int, p_carry_limit int, p_carry_after int,
    out slot smallint, out outcome text, out carried bigint)
  language plpgsql
  set jit = off
  as $$
declare
  v_cur smallint;
  v_live record;
  v_may_carry boolean;
  v_count_to int;
  v_tables text;
  v_lock_timeout text := current_setting('lock_timeout');
  v_kept bigint[];
begin
  carried := 0;
  if not pg_try_advisory_xact_lock({{schema}}.lock_ns('ring'), 0) then
    outcome := 'busy';
    return;
  end if;
  v_cur := {{schema}}.current_slot();
  slot := {{schema}}.oldest_sealed_slot();
  if slot is null then
    outcome := 'idle';
    return;
  end if;
  v_may_carry := (v_cur - slot + 16) % 16 + 1 >= p_carry_after;
  -- Unclaimed rows are counted only as far as the decision needs: past the carry limit when the slot may be
  -- carried, otherwise to the first (a backlog's oldest slot holds thousands, and this runs every tick).
  v_count_to := case when v_may_carry then p_carry_limit else 0 end;
  select * into v_live from {{schema}}.slot_live(slot, v_count_to);
  if v_live.reason is not null and not (v_may_carry and v_live.unclaimed + v_live.members <= p_carry_limit) then
    outcome := v_live.reason;
    return;
  end if;
  select string_agg(format('{{schema}}.%I', t || '_' || slot), ', ') into v_tables
    from unnest({{schema}}.ring_tables()) t;
  -- One subtransaction: anything that stops the prune below rolls back all of it (history copies included).
  begin
    -- The slot's completions go to compact history BEFORE its partitions are locked, so claims and
    -- settlements never wait for that copy.
    v_kept := {{schema}}.keep_completed_history(slot, '{}');
    perform set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
    execute 'lock table ' || v_tables || ' in access exclusive mode';
    perform set_config('lock_timeout', v_lock_timeout, true);
    select * into v_live from {{schema}}.slot_live(slot, v_count_to);
    if v_live.reason is not null then
      if not (v_may_carry and v_live.unclaimed + v_live.members <= p_carry_limit) then
        outcome := v_live.reason;
        raise sqlstate 'AWA02';
      end if;
      carried := {{schema}}.carry_forward(slot, v_cur);
    end if;
    -- Receipts that settled between the copy above and the lock.
    perform {{schema}}.keep_completed_history(slot, v_kept);
    perform {{schema}}.carry_lane_evidence(slot, v_cur);
    execute 'truncate ' || v_tables;
    delete from {{schema}}.receipt_forwards f where f.slot = prune.slot;
    perform {{schema}}.forget_tallies(prune.slot);
    outcome := case when v_live.reason is null then 'pruned' else 'carried' end;
  exception
    when lock_not_available then
      outcome := 'lock_busy';
      carried := 0;
    when sqlstate 'AWA02' then
      carried := 0;
  end;
end
$$;
