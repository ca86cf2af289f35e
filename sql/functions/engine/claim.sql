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

-- When this transaction's claim took place: its transaction time, or, for a limited queue's claim, the moment
-- it decided under its queue's limits lock (claim_limited() sets awa.claim_time for the transaction).
create function {{schema}}.claim_time() returns timestamptz
  language sql stable
  as $$
    select coalesce(nullif(current_setting('awa.claim_time', true), '')::timestamptz, now())
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
     instance_id, claimed_at, deadline_at, gaps, gap_horizon)
  values (claim_slot, batch_id, p_lane_id, p_ready_slot, p_first, p_last, v_n,
          case when v_uniform then p_leases[1] end,
          case when p_last - p_first + 1 <> v_n then p_seqs end,
          case when not v_uniform and v_n > 0 then p_leases end,
          p_instance, {{schema}}.claim_time(),
          case when p_deadline_secs > 0 then {{schema}}.claim_time() + make_interval(secs => p_deadline_secs) end,
          p_gaps, p_gap_horizon);
  -- The ring turned between the read above and this insert, so the receipt landed in a slot just sealed: a
  -- tally of that slot taken meanwhile (tally_slots()) no longer holds.
  if claim_slot <> (select r.slot from {{schema}}.ring_rotations r order by r.generation desc limit 1) then
    perform {{schema}}.forget_tallies(claim_slot);
  end if;
end
$$;

-- Brings a lane's high-water and floor up to the committed evidence and returns them, with the ring's current
-- slot as lane_high() read it. Caller holds the lane's claim lock. When the floor had caught up with the
-- high-water and no newer receipt recorded gaps, the floor follows the high-water at once (the common case: no
-- gaps at all). Otherwise the open gaps are examined: a gap whose producer has provably ended and that shows no
-- row is dead. The floor needs only the LOWEST position still unresolved, so that is all this looks for, by
-- ordered index probes: the cost does not grow with the rows that committed into the gaps (a 100,000-row COPY
-- that committed late once cost every claim a read of all its unclaimed rows).
create function {{schema}}.heal_lane(p_lane {{schema}}.lanes, out high bigint, out lane_floor bigint,
    out open_gaps int8multirange, out unsettled int8multirange, out ring_slot smallint)
  language plpgsql
  as $$
declare
  v_cached_high bigint := coalesce(pg_sequence_last_value(p_lane.claim_seq), 0);
  v_gapped boolean;
  v_xmin bigint;
  v_lowest bigint;
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
  unsettled := '{}';
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
  -- Two proofs that a gap's producer has ended; either suffices. (2) Every transaction older than the gap's
  -- horizon has ended, as of a snapshot no newer than the one the rows are read in below (the same snapshot
  -- under REPEATABLE READ; an older one under READ COMMITTED, whose later statements see whatever those
  -- transactions committed). (1) Only under READ COMMITTED, and only when (2) leaves a gap unsettled: the
  -- lane's producers still in flight are all newer than its horizon, read before the rows, so the reads below
  -- see any of them that ended. (Under a stricter isolation level that read would share the snapshot.)
  v_xmin := pg_snapshot_xmin(pg_current_snapshot())::text::bigint;
  unsettled := open_gaps - {{schema}}.lane_settled(p_lane.lane_id, lane_floor, v_xmin);
  if not isempty(unsettled) and current_setting('transaction_isolation') = 'read committed' then
    v_producers := {{schema}}.lane_producers(p_lane.lane_id);
    if v_producers > v_xmin then
      unsettled := unsettled - {{schema}}.lane_settled(p_lane.lane_id, lane_floor, v_producers);
    end if;
  end if;
  -- Unresolved: an open position whose owner may still commit (its gap is not settled), unless it shows a
  -- cancelled row; and a visible row nobody claimed or cancelled, settled or not. The lowest of the first
  -- kind is read off the ranges (cancelled rows are looked for only when the lowest is one); the second is
  -- looked for only below it, one index probe per gap range.
  v_lowest := lower(unsettled);
  if v_lowest is not null and not isempty({{schema}}.lane_cancelled(p_lane.lane_id,
                                                                    int8multirange(int8range(v_lowest, v_lowest + 1)))) then
    unsettled := unsettled - {{schema}}.lane_cancelled(p_lane.lane_id, unsettled);
    v_lowest := lower(unsettled);
  end if;
  select least(min(r.lane_seq), v_lowest) into v_lowest
    from unnest(open_gaps * int8multirange(int8range(lane_floor + 1, v_lowest))) g
    cross join lateral (
      select r.lane_seq from {{schema}}.ready_entries r
       where r.lane_id = p_lane.lane_id and r.lane_seq >= lower(g) and r.lane_seq < upper(g)
         and not exists (select 1 from {{schema}}.ready_tombstones t
                          where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)
       order by r.lane_seq
       limit 1) r;
  if v_lowest is null then
    v_set := setval(p_lane.floor_seq, high, true);
    lane_floor := high;
    open_gaps := '{}';
  elsif v_lowest - 1 > lane_floor then
    lane_floor := v_lowest - 1;
    v_set := setval(p_lane.floor_seq, lane_floor, true);
    open_gaps := open_gaps * int8multirange(int8range(lane_floor + 1, high + 1));
  end if;
  unsettled := unsettled * open_gaps;
end
$$;

-- The positions of a lane's open gaps that hold a cancelled row (a visible row with a tombstone): resolved,
-- never to be claimed. Read per gap range through the tombstones' index, so it costs what the gaps hold in
-- tombstones (an operator's cancels), not in rows.
create function {{schema}}.lane_cancelled(p_lane_id int, p_open int8multirange) returns int8multirange
  language plpgsql stable
  as $$
begin
  return coalesce((select range_agg(int8range(t.lane_seq, t.lane_seq + 1))
                     from unnest(p_open) g
                     cross join lateral (
                       select t.lane_seq from {{schema}}.ready_tombstones t
                        where t.lane_id = p_lane_id and t.lane_seq >= lower(g) and t.lane_seq < upper(g)
                          and exists (select 1 from {{schema}}.ready_entries r
                                       where r.slot = t.slot and r.lane_id = t.lane_id and r.lane_seq = t.lane_seq)
                       offset 0) t),
                  '{}');
end
$$;

-- Claims rows that committed late into open gaps of a lane (a producer that held its transaction open while
-- later jobs were claimed), the same way fresh rows are claimed (claim_slot_rows()): per gap run, in lane
-- order, from the slot holding the run's lowest row, for no more rows than are still wanted. So a claim reads
-- what it takes (plus a probe per run it looks into), however many rows wait in the gaps, and a late row costs
-- what a fresh one does. A run whose rows lie in two slots (the ring turned between two reservations) is taken
-- slot by slot: rows of the other slot inside the range taken stay open, and the next claim takes them first.
-- Returns the receipts.
create function {{schema}}.claim_gap_rows(p_lane {{schema}}.lanes, p_open int8multirange, p_unsettled int8multirange,
    p_max int, p_instance text, p_deadline_secs int, p_key_path text[])
  returns table (batch_id bigint, claim_slot smallint, n int, jobs json, job_ids bigint[], keys text[],
                 leases bigint[])
  language plpgsql
  as $$
declare
  v_left int := p_max;
  v_skip int8multirange;
  v_run int8range;
  v_from bigint;
  v_slot smallint;
  v_taken record;
begin
  -- Blocks in flight can only lie where a gap's owner may still commit (p_unsettled, from the heal): only then
  -- is the lock table read, and those blocks are skipped rather than walked.
  if not isempty(p_unsettled) then
    v_skip := {{schema}}.lane_inflight_blocks(p_lane.lane_id, pg_sequence_last_value(p_lane.enqueue_seq))
              * p_unsettled;
  end if;
  foreach v_run in array array(select unnest(p_open - coalesce(v_skip, '{}'))) loop
    v_from := lower(v_run);
    while v_left > 0 and v_from < upper(v_run) loop
      v_slot := null;
      select r.slot into v_slot from {{schema}}.ready_entries r
       where r.lane_id = p_lane.lane_id and r.lane_seq >= v_from and r.lane_seq < upper(v_run)
       order by r.lane_seq limit 1;
      exit when v_slot is null;
      v_taken := {{schema}}.claim_slot_rows(p_lane, v_slot, v_from, upper(v_run), null, v_left, false, p_instance,
                                            p_deadline_secs, p_key_path);
      v_from := v_taken.last_seq + 1;
      continue when v_taken.n = 0;
      v_left := v_left - v_taken.n;
      batch_id := v_taken.batch_id;
      claim_slot := v_taken.claim_slot;
      n := v_taken.n;
      jobs := v_taken.jobs;
      job_ids := v_taken.job_ids;
      keys := v_taken.keys;
      leases := v_taken.leases;
      return next;
    end loop;
    exit when v_left <= 0;
  end loop;
end
$$;

-- Positions above the high-water with no visible row, none of whose producers can still commit: rolled back,
-- or died. An empty receipt passes them, all gaps, so the high-water stops counting them as available and the
-- gaps resolve like any others. Only a quiet lane's tail is passed: one an earlier claim already found taken
-- (the drained mark) and no position taken since. On a busy lane the claim of any later row records the tail
-- as gaps anyway, and a tail whose producer is about to commit is claimed as fresh rows when it does, which
-- costs far less than claiming it out of a gap. For the same reason nothing is passed while a producer of the
-- lane is in flight (a COPY streaming its rows, an application transaction held open): the next claim that
-- finds the lane quiet and without producers passes what they left. The lane's last position is read first
-- and its producers after, so every producer of a position up to it is either listed (and the tail kept) or
-- has ended; the horizon is then this transaction's own. Returns null when nothing was passed.
create function {{schema}}.pass_empty_tail(p_lane {{schema}}.lanes, p_high bigint, p_instance text,
    out batch_id bigint, out claim_slot smallint)
  language plpgsql
  as $$
declare
  v_last bigint := pg_sequence_last_value(p_lane.drained_seq);
begin
  if v_last <= p_high or v_last <> pg_sequence_last_value(p_lane.enqueue_seq) then
    return;
  end if;
  if exists (select 1 from {{schema}}.lane_producer_xids(p_lane.lane_id)) then
    return;
  end if;
  if exists (select 1 from {{schema}}.ready_entries r
              where r.lane_id = p_lane.lane_id and r.lane_seq > p_high and r.lane_seq <= v_last) then
    return;
  end if;
  select * into batch_id, claim_slot from {{schema}}.record_receipt(p_lane.lane_id,
    (select r.slot from {{schema}}.ring_rotations r order by r.generation desc limit 1), p_high + 1, v_last,
    null, null, int8multirange(int8range(p_high + 1, v_last + 1)), pg_current_xact_id()::text::bigint + 1,
    p_instance, 0);
end
$$;

-- Claims the rows of one lane and ready slot from position p_from up to (not including) p_before, in lane
-- order, at most p_max, under one receipt whose range starts at p_from: every position up to its last row is
-- accounted for, and the positions that one read did not see (producers in flight or rolled back, rows of
-- another slot, earlier gaps) are its gaps. A range of cancelled rows only still gets its (empty) receipt:
-- that is what moves a high-water past them. p_fresh: the range lies above the high-water, so its gaps are
-- new and get a horizon read after the rows were seen (lane_gap_horizon()); otherwise it lies in an open gap
-- run, whose positions older receipts already recorded, and the receipt records its gaps ('{}' when none) so
-- that lane_open() counts what it covers. p_skip: blocks whose producers are in flight (lane_inflight_blocks()),
-- not read: they cannot show a row, and walking their index entries would cost one visibility check each; they
-- become gaps like any other position not seen. last_seq: the last position read (null: nothing was there).
-- p_key_path: given by a limited queue's claim (limit_claim.sql), which decides per member: the receipt's
-- members then come back also as arrays, in member order (job ids, run leases as the JSON gives them, and keys:
-- limit_key()). Read from the rows here, in the same pass, rather than parsed back out of the JSON. Null for any
-- other claim, which pays one filter test per row.
create function {{schema}}.claim_slot_rows(p_lane {{schema}}.lanes, p_slot smallint, p_from bigint,
    p_before bigint, p_skip int8multirange, p_max int, p_fresh boolean, p_instance text, p_deadline_secs int,
    p_key_path text[], out batch_id bigint, out claim_slot smallint, out n int, out jobs json, out last_seq bigint,
    out job_ids bigint[], out keys text[], out leases bigint[])
  language plpgsql
  as $$
declare
  v_has_tombstones boolean;
  v_seen bigint[];
  v_seqs bigint[];
  v_leases bigint[];
  v_gaps int8multirange;
  v_horizon bigint;
  v_receipt record;
begin
  v_has_tombstones := exists (select 1 from {{schema}}.ready_tombstones t
                               where t.slot = p_slot and t.lane_id = p_lane.lane_id and t.lane_seq >= p_from
                                 and t.lane_seq < p_before);
  -- The subquery's order feeds the aggregates in lane order. Two statements rather than one made conditional:
  -- the common one (nothing to skip) keeps the plan of one ordered index scan.
  if p_skip is null or isempty(p_skip) then
    select max(r.lane_seq), array_agg(r.lane_seq),
           array_agg(r.lane_seq) filter (where not r.dead),
           array_agg(r.run_lease + 1) filter (where not r.dead),
           json_agg({{schema}}.claimed_json(r.job_id, r.kind, r.args, r.attempt, r.max_attempts, r.run_lease,
                                            r.priority, r.enqueued_at, r.ready_at, r.meta)) filter (where not r.dead),
           array_agg(r.job_id) filter (where p_key_path is not null and not r.dead),
           array_agg({{schema}}.limit_key(r.meta, r.args, p_key_path))
             filter (where p_key_path is not null and not r.dead)
      into last_seq, v_seen, v_seqs, v_leases, jobs, job_ids, keys
      from (select r.lane_seq, r.job_id, r.kind, r.args, r.attempt, r.max_attempts, r.run_lease, r.priority,
                   r.enqueued_at, r.ready_at, r.meta,
                   (v_has_tombstones and exists (
                     select 1 from {{schema}}.ready_tombstones t
                      where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)) as dead
              from {{schema}}.ready_entries r
             where r.slot = p_slot and r.lane_id = p_lane.lane_id and r.lane_seq >= p_from and r.lane_seq < p_before
             order by r.lane_seq
             limit p_max) r;
  else
    -- Range by range around the blocks in flight (each read through the index for at most p_max rows).
    select max(r.lane_seq), array_agg(r.lane_seq),
           array_agg(r.lane_seq) filter (where not r.dead),
           array_agg(r.run_lease + 1) filter (where not r.dead),
           json_agg({{schema}}.claimed_json(r.job_id, r.kind, r.args, r.attempt, r.max_attempts, r.run_lease,
                                            r.priority, r.enqueued_at, r.ready_at, r.meta)) filter (where not r.dead),
           array_agg(r.job_id) filter (where p_key_path is not null and not r.dead),
           array_agg({{schema}}.limit_key(r.meta, r.args, p_key_path))
             filter (where p_key_path is not null and not r.dead)
      into last_seq, v_seen, v_seqs, v_leases, jobs, job_ids, keys
      from (select r.lane_seq, r.job_id, r.kind, r.args, r.attempt, r.max_attempts, r.run_lease, r.priority,
                   r.enqueued_at, r.ready_at, r.meta,
                   (v_has_tombstones and exists (
                     select 1 from {{schema}}.ready_tombstones t
                      where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)) as dead
              from unnest(int8multirange(int8range(p_from, p_before)) - p_skip) g
              cross join lateral (
                select r.* from {{schema}}.ready_entries r
                 where r.slot = p_slot and r.lane_id = p_lane.lane_id and r.lane_seq >= lower(g)
                   and r.lane_seq < upper(g)
                 order by r.lane_seq
                 limit p_max) r
             order by r.lane_seq
             limit p_max) r;
  end if;
  if last_seq is null then
    return;
  end if;
  -- The gaps are what that one read did not see. (Not a second read of the table: under READ COMMITTED it
  -- would see rows committed since, and count positions as covered that this receipt never returned.)
  if cardinality(v_seen) <> last_seq - p_from + 1 then
    select int8multirange(int8range(p_from, last_seq + 1)) - range_agg(int8range(s, s + 1))
      into v_gaps
      from unnest(v_seen) s;
    if p_fresh then
      v_horizon := {{schema}}.lane_gap_horizon(p_lane.lane_id);
    end if;
  elsif not p_fresh then
    v_gaps := '{}';
  end if;
  v_receipt := {{schema}}.record_receipt(p_lane.lane_id, p_slot, p_from, last_seq, v_seqs, v_leases, v_gaps,
    v_horizon, p_instance, p_deadline_secs);
  batch_id := v_receipt.batch_id;
  claim_slot := v_receipt.claim_slot;
  n := coalesce(cardinality(v_seqs), 0);
  leases := case when p_key_path is not null then v_leases end;
end
$$;

-- Claims fresh rows of a lane: those above its high-water, in lane order, from the ready slot that holds the
-- next one (claim_slot_rows()). At most one receipt, so one record (all null when there was nothing to claim),
-- not a set: the caller assigns it. p_current: the ring's current slot as the caller last read it (a hint:
-- see below).
create function {{schema}}.claim_fresh_rows(p_lane {{schema}}.lanes, p_high bigint, p_current smallint, p_max int,
    p_instance text, p_deadline_secs int, p_key_path text[], out batch_id bigint, out claim_slot smallint, out n int,
    out jobs json, out job_ids bigint[], out keys text[], out leases bigint[])
  language plpgsql
  as $$
declare
  v_last bigint := pg_sequence_last_value(p_lane.enqueue_seq);
  v_head_slot smallint;
  v_skip int8multirange;
  v_range int8range;
  v_taken record;
begin
  -- The next position is nearly always a row of the current slot, where producers write: one probe of that
  -- partition finds it. Further up, the lowest row is looked for around the blocks still in flight (a COPY
  -- streaming into the lane would otherwise be walked entry by entry on every claim).
  -- (The slot comes from the heal's read of the ring, a moment ago: as a parameter it prunes the other
  -- partitions from the plan, which a subquery in the same statement does not. Should the ring have turned
  -- since, the probe finds nothing there and the wider one runs.)
  select r.slot into v_head_slot from {{schema}}.ready_entries r
   where r.slot = p_current and r.lane_id = p_lane.lane_id and r.lane_seq = p_high + 1;
  -- Next, every partition for the lowest row among the positions just above it (a backlog older than the
  -- last rotation; producers of single jobs in flight or rolled back leave a few entries to walk past, no
  -- more). Only a lane with more positions taken than that may hold a block in flight, and only then is the
  -- lock table read.
  if v_head_slot is null then
    select r.slot into v_head_slot from {{schema}}.ready_entries r
     where r.lane_id = p_lane.lane_id and r.lane_seq > p_high and r.lane_seq <= p_high + 64
     order by r.lane_seq limit 1;
  end if;
  if v_head_slot is null and v_last > p_high + 64 then
    v_skip := {{schema}}.lane_inflight_blocks(p_lane.lane_id, v_last);
    foreach v_range in array array(select unnest(int8multirange(int8range(p_high + 65, null)) - v_skip)) loop
      select r.slot into v_head_slot from {{schema}}.ready_entries r
       where r.lane_id = p_lane.lane_id and r.lane_seq >= lower(v_range)
         and r.lane_seq < coalesce(upper(v_range), 9223372036854775807)
       order by r.lane_seq limit 1;
      exit when v_head_slot is not null;
    end loop;
  end if;
  if v_head_slot is null then
    select * into batch_id, claim_slot from {{schema}}.pass_empty_tail(p_lane, p_high, p_instance);
    if batch_id is not null then
      n := 0;
    end if;
    return;
  end if;
  v_taken := {{schema}}.claim_slot_rows(p_lane, v_head_slot, p_high + 1, 9223372036854775807, v_skip, p_max, true,
                                        p_instance, p_deadline_secs, p_key_path);
  batch_id := v_taken.batch_id;
  claim_slot := v_taken.claim_slot;
  n := v_taken.n;
  jobs := v_taken.jobs;
  job_ids := v_taken.job_ids;
  keys := v_taken.keys;
  leases := v_taken.leases;
end
$$;

-- Claims up to p_max jobs of one lane whose claim lock the caller holds: heal its high-water and floor, take
-- rows that committed late into open gaps (the oldest), then fresh rows above the high-water.
create function {{schema}}.claim_lane(p_lane {{schema}}.lanes, p_max int, p_instance text, p_deadline_secs int,
    p_key_path text[] default null)
  returns table (batch_id bigint, claim_slot smallint, n int, jobs json, job_ids bigint[], keys text[],
                 leases bigint[])
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
    for b in select * from {{schema}}.claim_gap_rows(p_lane, v_heal.open_gaps, v_heal.unsettled, v_left, p_instance,
                                                     p_deadline_secs, p_key_path) loop
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      n := b.n;
      jobs := b.jobs;
      job_ids := b.job_ids;
      keys := b.keys;
      leases := b.leases;
      return next;
    end loop;
  end if;
  if v_left <= 0 then
    return;
  end if;
  b := {{schema}}.claim_fresh_rows(p_lane, v_heal.high, v_heal.ring_slot, v_left, p_instance, p_deadline_secs,
                                   p_key_path);
  if b.n > 0 then
    v_left := v_left - b.n;
    batch_id := b.batch_id;
    claim_slot := b.claim_slot;
    n := b.n;
    jobs := b.jobs;
    job_ids := b.job_ids;
    keys := b.keys;
    leases := b.leases;
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

-- Lanes are taken in aged-priority order, each under a try-lock: a lane another claimer holds is skipped. Each
-- receipt comes back with whether its lane is a bulk lane (hosts start live jobs ahead of held bulk ones).
-- When every lane with work was held and this call holds none, it waits (briefly) for the first of them
-- instead of coming back empty: hosts sharing a queue then take turns on its lane as each claim ends, not
-- after a sleep. Waiting only while holding no lane lock means a waiter can never close a cycle.
-- A priority's live lanes come before its bulk lane (where COPY loads go), so a job the application enqueues
-- while a load drains is taken by the next claim rather than after the load; but while the bulk lane has work
-- the live lanes leave it its share of the claim (half, rounded down, or its backlog if smaller), so a steady
-- stream of live jobs cannot starve a load either.
-- Generic plans, for this call and every function it calls: a statement over the ring's partitions whose
-- parameters pick one partition (a slot) costs more as a generic plan on paper (every partition is in it,
-- pruned only when it runs), so PostgreSQL kept a custom plan and planned it over sixteen partitions on every
-- call. One claim of one job, one connection: 0.92 ms with custom plans, 0.69 ms generic.
-- p_key_path: a limited queue's (see claim_slot_rows()); each receipt then comes with its members' job ids,
-- leases and keys.
create function {{schema}}.claim_lanes(p_queue text, p_max int, p_instance text, p_aging_secs int,
    p_deadline_secs int, p_wait_ms int, p_key_path text[] default null)
  returns table (batch_id bigint, claim_slot smallint, jobs json, bulk boolean, job_ids bigint[], keys text[],
                 leases bigint[])
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  as $$
declare
  v_lanes {{schema}}.lanes[];
  v_lane {{schema}}.lanes;
  v_first_busy {{schema}}.lanes;
  v_left int := p_max;
  v_take int;
  -- Per priority: what this claim keeps back from the live lanes for the bulk lane that comes after them.
  v_bulk_share int[] := array[0, 0, 0, 0];
  v_busy int := 0;
  v_locked boolean := false;
  b record;
begin
  -- Lanes with work, each lane's cursors read once, in priority order, live before bulk (ties in random order,
  -- so claimers of a sharded queue start on different shards); none while the queue is paused.
  v_lanes := array(
    select l
      from {{schema}}.lanes l
      cross join lateral (select coalesce(pg_sequence_last_value(l.claim_seq), 0) as high,
                                 coalesce(pg_sequence_last_value(l.floor_seq), 0) as floor) c
     where l.queue = p_queue and l.shard >= 0
       and (coalesce(pg_sequence_last_value(l.enqueue_seq), 0) > c.high or c.floor < c.high)
       and not exists (select 1 from {{schema}}.queue_settings q where q.queue = p_queue and q.paused_at is not null)
     order by l.priority, l.bulk, random());
  -- Aging can only reorder lanes of different priorities, and only then are their heads read (each a probe of
  -- every ring partition). A separate statement, not a join made conditional: a generic plan sets up the
  -- head probe's sixteen index scans whether or not it runs them, which cost about as much as the rest of the
  -- lane choice.
  -- The claimed high-water is read in a subquery of its own: as part of the probe's condition the (volatile)
  -- sequence read is a filter, not an index bound, and the probe walked every claimed row of the lane still in
  -- the ring (all of them when a held ring keeps its slots: 200 ms a claim at 700,000 settled rows).
  if v_lanes[1].priority <> v_lanes[cardinality(v_lanes)].priority then
    v_lanes := array(
      select x.w
        from (select w, coalesce(pg_sequence_last_value(w.claim_seq), 0) as high from unnest(v_lanes) w) x
        left join lateral (
          select r.ready_at from {{schema}}.ready_entries r
           where r.lane_id = (x.w).lane_id and r.lane_seq > x.high
           order by r.lane_seq limit 1) h on true
       order by greatest(1, (x.w).priority
                            - coalesce(floor(extract(epoch from now() - h.ready_at) / p_aging_secs), 0)),
                (x.w).bulk, h.ready_at nulls last, random());
  end if;
  -- The bulk lanes' share of each priority: their positions neither claimed nor passed (an upper bound on their
  -- jobs), at most half, rounded down, so a claim of one job takes a live one.
  foreach v_lane in array v_lanes loop
    if v_lane.bulk then
      v_bulk_share[v_lane.priority] := least(p_max / 2, v_bulk_share[v_lane.priority]
        + coalesce(pg_sequence_last_value(v_lane.enqueue_seq), 0) - coalesce(pg_sequence_last_value(v_lane.floor_seq), 0));
    end if;
  end loop;
  foreach v_lane in array v_lanes
  loop
    exit when v_left <= 0;
    v_take := case when v_lane.bulk then v_left else v_left - v_bulk_share[v_lane.priority] end;
    continue when v_take <= 0;
    if not pg_try_advisory_xact_lock({{schema}}.lock_ns('claim'), v_lane.lane_id) then
      v_busy := v_busy + 1;
      if v_busy = 1 then
        v_first_busy := v_lane;
      end if;
      continue;
    end if;
    v_locked := true;
    if v_lane.bulk then
      v_bulk_share[v_lane.priority] := 0;
    end if;
    for b in select * from {{schema}}.claim_lane(v_lane, v_take, p_instance, p_deadline_secs, p_key_path) loop
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := b.jobs;
      bulk := v_lane.bulk;
      job_ids := b.job_ids;
      keys := b.keys;
      leases := b.leases;
      return next;
    end loop;
  end loop;
  if v_busy > 0 and not v_locked and {{schema}}.wait_for_lane(v_first_busy.lane_id, p_wait_ms) then
    v_busy := v_busy - 1;
    for b in select * from {{schema}}.claim_lane(v_first_busy, v_left, p_instance, p_deadline_secs, p_key_path) loop
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := b.jobs;
      bulk := v_first_busy.bulk;
      job_ids := b.job_ids;
      keys := b.keys;
      leases := b.leases;
      return next;
    end loop;
  end if;
  -- A lane with work that another claimer still held: say so (a row with no batch), so the caller tries
  -- again soon instead of taking "fewer than asked" for "nothing left".
  if v_busy > 0 and v_left > 0 then
    batch_id := null;
    claim_slot := null;
    jobs := null;
    bulk := null;
    job_ids := null;
    keys := null;
    leases := null;
    return next;
  end if;
end
$$;

-- The claim hosts call. A queue with limits (limit_claim.sql) is claimed through claim_limited(), which decides
-- what may start; any other queue's claim is claim_lanes() as it is, after one read of its settings row (the
-- same row the pause check reads). retry_ms: see claim_limited(). rate_limited: the queue's limits (declared or
-- overridden) include a rate, so its hosts hold nothing ahead of their permits (a job held for a permit would
-- start after the window its claim was counted in).
create function {{schema}}.claim(p_queue text, p_max int, p_instance text, p_aging_secs int, p_deadline_secs int,
    p_wait_ms int)
  returns table (batch_id bigint, claim_slot smallint, jobs json, bulk boolean, retry_ms int, rate_limited boolean)
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  as $$
declare
  v_limits jsonb;
  v_paused boolean;
begin
  select {{schema}}.effective_limits(q.limits_declared, q.limits_override), q.paused_at is not null
    into v_limits, v_paused
    from {{schema}}.queue_settings q
   where q.queue = p_queue and (q.limits_declared is not null or q.limits_override is not null);
  if v_paused then
    return;
  elsif v_limits is not null then
    return query select l.batch_id, l.claim_slot, l.jobs, l.bulk, l.retry_ms,
                        v_limits #> '{perKey,rate}' is not null or v_limits #> '{queue,rate}' is not null
                   from {{schema}}.claim_limited(p_queue, v_limits, p_max, p_instance, p_aging_secs,
                                                 p_deadline_secs, p_wait_ms) l;
  else
    return query select c.batch_id, c.claim_slot, c.jobs, c.bulk, null::int, false
                   from {{schema}}.claim_lanes(p_queue, p_max, p_instance, p_aging_secs, p_deadline_secs, p_wait_ms) c;
  end if;
end
$$;
