-- Slot tallies (tables in sql/migrations/017_slot_tallies.sql): the maintenance leader sums each sealed slot
-- once its receipts have all settled, so operator reads aggregate only the slots not tallied. Prune never reads
-- a tally: what it truncates is decided from the receipts themselves, so a wrong tally could mislead a page but
-- never lose a job.

-- The slots whose receipts and closures a read must still aggregate itself: every slot with no tally.
create function {{schema}}.untallied_slots() returns smallint[]
  language sql stable
  as $$
    select array(select s::smallint from generate_series(0, 15) s
                  where not exists (select 1 from {{schema}}.tallied_slots t where t.slot = s))
  $$;

-- Whether the rows that receipts of slot p_slot read from p_ready_slot are still in the ring, asked with one
-- row a completed member of one of them read (lane p_lane_id, position p_seq). A receipt that read its own
-- slot's rows is truncated with them; one that read an older slot's rows outlives them once prune truncates
-- that slot (their completions are then in compact history). A slot is truncated whole and a lane position is
-- never reused, so one row answers for every receipt of the same slot, slot read and lane.
create function {{schema}}.receipt_rows_held(p_slot smallint, p_ready_slot smallint, p_lane_id int, p_seq bigint)
  returns boolean
  language sql stable
  as $$
    select p_ready_slot = p_slot
        or exists (select 1 from {{schema}}.ready_entries r
                    where r.slot = p_ready_slot and r.lane_id = p_lane_id and r.lane_seq = p_seq)
  $$;

-- Tallies every sealed slot that holds rows, has no tally yet and whose receipts have all settled. Under the
-- ring lock (no rotation or prune meanwhile) and a SHARE lock on the slot's receipt and closure partitions,
-- taken only once the slot looks settled (a settlement or claim still writing there finishes first; one that
-- cannot within p_lock_timeout_ms leaves the slot for the next tick). A claim that read the current slot just
-- before it was sealed may still write its receipt there after the tally: record_receipt() then drops the
-- tally. Returns how many slots it tallied.
create function {{schema}}.tally_slots(p_lock_timeout_ms int) returns int
  language plpgsql
  set jit = off
  as $$
declare
  v_cur smallint;
  v_s smallint;
  v_n int := 0;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  if not pg_try_advisory_xact_lock({{schema}}.lock_ns('ring'), 0) then
    return 0;
  end if;
  v_cur := {{schema}}.current_slot();
  for i in 1..15 loop
    v_s := ((v_cur + i) % 16)::smallint;
    continue when exists (select 1 from {{schema}}.tallied_slots t where t.slot = v_s)
               or not {{schema}}.slot_has_rows(v_s)
               -- Checked first without the lock: a slot still settling is passed over without making the
               -- settlements writing there wait (it is checked again under the lock).
               or {{schema}}.slot_has_open_receipt(v_s);
    begin
      perform set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
      execute format('lock table {{schema}}.%I, {{schema}}.%I in share mode',
                     'claim_batches_' || v_s, 'closure_batches_' || v_s);
      perform set_config('lock_timeout', v_lock_timeout, true);
      continue when {{schema}}.slot_has_open_receipt(v_s);
      insert into {{schema}}.slot_tallies (slot, ready_slot, lane_id, completed, first_closed_at, last_closed_at)
      select v_s, g.ready_slot, g.lane_id, g.n, g.first_at, g.last_at
        from (select b.ready_slot, b.lane_id, sum(c.n) as n, min(c.first_at) as first_at, max(c.last_at) as last_at,
                     min(coalesce(b.lane_seqs[1], b.first_seq)) as probe_seq
                from {{schema}}.claim_batches b
                join (select cc.batch_id, sum(cc.n) as n, min(cc.closed_at) as first_at, max(cc.closed_at) as last_at
                        from {{schema}}.closure_batches cc
                       where cc.slot = v_s and cc.outcome = 'completed' group by cc.batch_id) c
                  on c.batch_id = b.batch_id
               where b.slot = v_s
               group by b.ready_slot, b.lane_id) g
       where {{schema}}.receipt_rows_held(v_s, g.ready_slot, g.lane_id, g.probe_seq);
      insert into {{schema}}.tallied_slots (slot) values (v_s);
      v_n := v_n + 1;
    exception when lock_not_available then
      null;
    end;
  end loop;
  return v_n;
end
$$;

-- Whether a receipt living in slot p_slot has a member no closure names yet.
create function {{schema}}.slot_has_open_receipt(p_slot smallint) returns boolean
  language sql stable
  as $$
    select exists (
      select 1 from {{schema}}.claim_batches b
        left join (select c.batch_id, sum(c.n) as n from {{schema}}.closure_batches c
                    where c.slot = p_slot group by c.batch_id) c on c.batch_id = b.batch_id
       where b.slot = p_slot and b.size > coalesce(c.n, 0))
  $$;

-- Forgets the tallies a slot's truncation or reuse makes wrong: the slot's own, and those of newer slots'
-- receipts that read its rows (prune has moved their completions to compact history).
create function {{schema}}.forget_tallies(p_slot smallint) returns void
  language sql
  as $$
    delete from {{schema}}.tallied_slots t where t.slot = p_slot;
    delete from {{schema}}.slot_tallies t where t.slot = p_slot or t.ready_slot = p_slot;
  $$;
