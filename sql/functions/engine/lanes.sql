-- Lanes: one ordered stream of positions per (queue, priority, enqueue shard), and the rules producers and
-- claimers follow on them. Cursors are sequences (non-transactional, no dead tuples):
--   enqueue_seq   last position handed to a producer;
--   claim_seq     claimed high-water: no receipt covers a position above it (a cache of committed evidence,
--                 healed from receipts, stored only under the lane's claim lock);
--   floor_seq     every position at or below it is claimed, cancelled, or dead (its producer ended without
--                 committing); positions in (floor, high] that no receipt covers are open gaps;
--   notify_seq    when a producer of the lane last sent a wake-up (epoch ms);
--   drained_seq   the lane's last position when a claimer last found it drained (a hint for wake-ups only);
--   receipt_gen_seq  a ring generation that every receipt above claim_seq was written in or after (stored
--                 with claim_seq, under the claim lock: lets lane_high() read one ring partition, not all).
-- docs/architecture.md, "Lanes, gaps and the floor", gives the proof.

-- How many enqueue shards a queue has (1 unless set_enqueue_shards() said otherwise).
create function {{schema}}.queue_shards(p_queue text) returns smallint
  language sql stable
  as $$
    select coalesce((select q.enqueue_shards from {{schema}}.queue_settings q where q.queue = p_queue), 1::smallint)
  $$;

-- Creates the live lanes of a queue (p_bulk false) or its bulk lanes (p_bulk true): four priorities per enqueue
-- shard (DDL: six sequences each). A queue gets bulk lanes the first time a bulk load reaches it, so one that
-- never sees a COPY pays for no more lanes than it uses. Hosts and clients call it in a transaction of their own
-- before they enqueue, so a producer's open transaction never holds this lock; a producer that reaches a lane
-- nobody created yet creates it inside its own transaction (and another producer of the same new queue then
-- waits for it). With p_wait false it returns false instead of waiting. Shard 0's live sequences keep the names
-- lanes always had.
create function {{schema}}.ensure_lanes(p_queue text, p_wait boolean, p_bulk boolean) returns boolean
  language plpgsql
  as $$
declare
  v_shards smallint := {{schema}}.queue_shards(p_queue);
  p smallint;
  s smallint;
  v_lane {{schema}}.lanes;
begin
  if (select count(*) from {{schema}}.lanes where queue = p_queue and shard between 0 and v_shards - 1 and bulk = p_bulk)
     = 4 * v_shards then
    return true;
  end if;
  if p_wait then
    perform pg_advisory_xact_lock({{schema}}.lock_ns('lanes'), hashtext(p_queue));
  elsif not pg_try_advisory_xact_lock({{schema}}.lock_ns('lanes'), hashtext(p_queue)) then
    return false;
  end if;
  for s in 0..v_shards - 1 loop
    for p in 1..4 loop
      continue when exists (select 1 from {{schema}}.lanes
                             where queue = p_queue and priority = p and shard = s and bulk = p_bulk);
      v_lane := {{schema}}.create_lane(p_queue, p::smallint, s::smallint, p_bulk,
        md5(p_queue || ':' || p || case when s > 0 then ':' || s else '' end
            || case when p_bulk then ':bulk' else '' end),
        v_shards);
    end loop;
  end loop;
  return true;
end
$$;

-- Creates one lane: its six sequences, named from p_name, and its row. The caller holds the queue's 'lanes' lock.
create function {{schema}}.create_lane(p_queue text, p_priority smallint, p_shard smallint, p_bulk boolean,
    p_name text, p_shards smallint) returns {{schema}}.lanes
  language plpgsql
  as $$
declare
  v_prefix text;
  v_lane {{schema}}.lanes;
begin
  foreach v_prefix in array array['lane_enq_', 'lane_claim_', 'lane_floor_', 'lane_notify_', 'lane_drained_',
                                    'lane_receipt_gen_'] loop
    execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_prefix || p_name);
    -- Marked as called at 0 so pg_sequence_last_value() reads 0, not null.
    perform setval(format('{{schema}}.%I', v_prefix || p_name)::regclass, 0, true);
  end loop;
  insert into {{schema}}.lanes
    (queue, priority, shard, bulk, enqueue_seq, claim_seq, floor_seq, notify_seq, drained_seq, receipt_gen_seq,
     enqueue_shards)
  values (p_queue, p_priority, p_shard, p_bulk, format('{{schema}}.%I', 'lane_enq_' || p_name)::regclass,
          format('{{schema}}.%I', 'lane_claim_' || p_name)::regclass,
          format('{{schema}}.%I', 'lane_floor_' || p_name)::regclass,
          format('{{schema}}.%I', 'lane_notify_' || p_name)::regclass,
          format('{{schema}}.%I', 'lane_drained_' || p_name)::regclass,
          format('{{schema}}.%I', 'lane_receipt_gen_' || p_name)::regclass,
          p_shards)
  returning * into v_lane;
  return v_lane;
end
$$;

-- Sets how many enqueue shards a queue has, and creates their lanes now (in this, the caller's short
-- transaction, not in a producer's): live lanes, and bulk lanes if the queue has had a bulk load. Fewer shards than before: producers stop using the higher ones, and
-- claimers drain them like any lane with work. The count is copied onto the queue's lane rows, where
-- producers read it (reserve_lane()), after the lanes it names exist. Returns the previous count.
create function {{schema}}.set_enqueue_shards(p_queue text, p_shards smallint) returns smallint
  language plpgsql
  as $$
declare
  v_before smallint := {{schema}}.queue_shards(p_queue);
begin
  insert into {{schema}}.queue_settings (queue, enqueue_shards) values (p_queue, p_shards)
  on conflict (queue) do update set enqueue_shards = excluded.enqueue_shards, updated_at = now()
   where queue_settings.enqueue_shards <> excluded.enqueue_shards;
  perform {{schema}}.ensure_lanes(p_queue, true, false);
  if exists (select 1 from {{schema}}.lanes where queue = p_queue and bulk) then
    perform {{schema}}.ensure_lanes(p_queue, true, true);
  end if;
  update {{schema}}.lanes set enqueue_shards = p_shards where queue = p_queue and enqueue_shards <> p_shards;
  return v_before;
end
$$;

-- Reserves p_count consecutive positions of a lane for the calling transaction, and says which slot its rows
-- go to. p_bulk: in the priority's bulk lane (a bulk load), not a live one. Producers do not wait for each other's transactions. First the producer makes sure it has its
-- transaction id, then takes the lane's 'producing' lock (shared, held to its transaction's end: the lock
-- table is how claimers learn which producers of a lane may still commit, lane_producer_xids()), and only
-- then takes positions. A single position is one nextval(); a block of several needs nextval() and setval()
-- with nobody drawing in between. So the draw runs under the lane's 'reserve' lock, shared for one position
-- (single producers never wait for each other, not even for microseconds) and exclusive for a block, inside
-- a subtransaction rolled back on purpose to release it at once (sequences are not transactional, so the
-- positions stay taken): a block waits only for draws in progress, never for a transaction.
create function {{schema}}.reserve_lane(p_queue text, p_priority smallint, p_count int, p_bulk boolean,
    out lane_id int, out first_seq bigint, out slot smallint)
  language plpgsql
  as $$
declare
  v_shard smallint;
  v_shards smallint;
  v_enqueue_seq regclass;
  v_notify_seq regclass;
  v_drained_seq regclass;
  v_now_ms bigint;
  v_notify boolean := false;
  v_removed boolean;
  v_done text;
begin
  -- Shard 0's lane, which also says how many shards the queue has: with one (nearly always) that is the lane.
  -- With several, the next shard in turn. (Queries inline rather than through a helper: PL/pgSQL caches their
  -- plans.) Calls below are assignments rather than PERFORMs: PL/pgSQL evaluates a lone call directly, where
  -- a PERFORM (or SELECT INTO) starts an executor for it. The loop runs once, unless the queue was removed
  -- under this producer (see the exception handler below).
  loop
    v_shard := 0;
    select l.lane_id, l.enqueue_seq, l.notify_seq, l.drained_seq, l.enqueue_shards
      into lane_id, v_enqueue_seq, v_notify_seq, v_drained_seq, v_shards
      from {{schema}}.lanes l
     where l.queue = p_queue and l.priority = p_priority and l.shard = 0 and l.bulk = p_bulk;
    if v_shards > 1 then
      v_shard := (nextval('{{schema}}.shard_rotor_seq') % v_shards)::smallint;
      if v_shard > 0 then
        lane_id := null;
        select l.lane_id, l.enqueue_seq, l.notify_seq, l.drained_seq
          into lane_id, v_enqueue_seq, v_notify_seq, v_drained_seq
          from {{schema}}.lanes l
         where l.queue = p_queue and l.priority = p_priority and l.shard = v_shard and l.bulk = p_bulk;
      end if;
    end if;
    if lane_id is null then
      perform {{schema}}.ensure_lanes(p_queue, true, p_bulk);
      select l.lane_id, l.enqueue_seq, l.notify_seq, l.drained_seq
        into lane_id, v_enqueue_seq, v_notify_seq, v_drained_seq
        from {{schema}}.lanes l
       where l.queue = p_queue and l.priority = p_priority and l.shard = v_shard and l.bulk = p_bulk;
    end if;
    -- In this order: the transaction id, then the lock that lists it among the lane's producers, then positions.
    v_done := pg_current_xact_id()::text;
    v_done := pg_advisory_xact_lock_shared({{schema}}.lock_ns('producing'), lane_id)::text;
    begin
      if p_count = 1 then
        v_done := pg_advisory_xact_lock_shared({{schema}}.lock_ns('reserve'), lane_id)::text;
        first_seq := nextval(v_enqueue_seq);
      else
        v_done := pg_advisory_xact_lock({{schema}}.lock_ns('reserve'), lane_id)::text;
        first_seq := nextval(v_enqueue_seq);
        v_done := setval(v_enqueue_seq, first_seq + p_count - 1, true)::text;
      end if;
      -- PostgreSQL serialises the commits of transactions that NOTIFY, so producers of a busy lane take turns:
      -- one wake-up per lane per 5 ms. A host that is woken also claims again a little later (see the
      -- dispatcher), which picks up the jobs of producers that skipped theirs; polling remains the truth.
      -- The first position after the drained mark always wakes: a claimer found the lane empty up to it, so
      -- it is likely idle, and this job would otherwise wait for its next look. (Single producers decide it
      -- side by side; two of one 5 ms window may both wake the hosts, which costs a wake-up, nothing more.)
      v_now_ms := (extract(epoch from clock_timestamp()) * 1000)::bigint;
      if first_seq - 1 <= pg_sequence_last_value(v_drained_seq)
         or v_now_ms - pg_sequence_last_value(v_notify_seq) >= 5 then
        v_done := setval(v_notify_seq, v_now_ms, true)::text;
        v_notify := true;
      end if;
      raise sqlstate 'AWA01';
    exception
      when sqlstate 'AWA01' then
        v_removed := false;
      when internal_error then
        -- remove_queue() dropped this lane between this producer's read of its row and its 'producing' lock
        -- (the lock waited for the removal to commit): its sequences are gone, "could not open relation".
        -- Nothing was drawn; start over on the queue's lanes as they are now (created afresh if need be).
        -- A snapshot that still shows the removed lane (repeatable read) cannot: the transaction must retry.
        if pg_relation_filenode(v_enqueue_seq) is not null then
          raise;
        end if;
        if current_setting('transaction_isolation') <> 'read committed' then
          raise exception 'queue "%" was removed while this transaction enqueued into it', p_queue
            using errcode = 'serialization_failure', hint = 'Retry the transaction.';
        end if;
        v_removed := true;
    end;
    exit when not v_removed;
  end loop;
  -- A block's extent, for claimers: held (shared) to this transaction's end, so a claimer that reads the lock
  -- table knows which positions cannot show a row yet and need not walk their index entries one by one
  -- (lane_inflight_blocks()). Taken after the positions, in the transaction itself (the subtransaction above
  -- releases what it takes); a claimer that looks before then finds the block empty anyway.
  -- Each named block holds two entries of the server's shared lock table (max_locks_per_transaction x
  -- connections, 6,400 by default) to the transaction's end: a load of millions of rows over many lanes in one
  -- transaction ran out of it ("out of shared memory"). So a transaction names its first 256 blocks only;
  -- claimers walk the entries of any later block still in flight, as they would one never named.
  if p_count > 1 and coalesce(nullif(current_setting('awa.named_blocks', true), ''), '0')::int < 256 then
    v_done := set_config('awa.named_blocks',
                         (coalesce(nullif(current_setting('awa.named_blocks', true), ''), '0')::int + 1)::text, true);
    v_done := pg_advisory_xact_lock_shared({{schema}}.lock_ns('block_first:' || lane_id),
                                           {{schema}}.low_key(first_seq))::text;
    v_done := pg_advisory_xact_lock_shared({{schema}}.lock_ns('block_last:' || lane_id),
                                           {{schema}}.low_key(first_seq + p_count - 1))::text;
  end if;
  select r.slot into slot from {{schema}}.ring_rotations r order by r.generation desc limit 1;
  if v_notify then
    v_done := pg_notify('awa:{{schema}}', p_queue)::text;
  end if;
end
$$;

-- Appends job bodies to a lane as ready rows, in the order given: one reservation, one insert. Every path that
-- makes jobs runnable goes through here (enqueue, promotion, DLQ retry); COPY reserves with reserve_lane and
-- streams the same columns.
create function {{schema}}.append_ready(p_queue text, p_priority smallint, p_bodies {{schema}}.job_body[])
  returns void
  language plpgsql
  as $$
declare
  v record;
begin
  v := {{schema}}.reserve_lane(p_queue, p_priority, cardinality(p_bodies), false);
  insert into {{schema}}.ready_entries
    (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, attempt, max_attempts, run_lease,
     enqueued_at, ready_at, meta)
  select v.slot, v.lane_id, v.first_seq + u.o - 1, u.job_id, u.kind, p_queue, p_priority, u.args,
         coalesce(u.attempt, 0), u.max_attempts, coalesce(u.run_lease, 0), coalesce(u.enqueued_at, now()),
         coalesce(u.ready_at, now()), u.meta
    from unnest(p_bodies) with ordinality as u(job_id, kind, args, attempt, max_attempts, run_lease,
                                                enqueued_at, ready_at, meta, o);
end
$$;

-- The claimed high-water of a lane from committed evidence: the cached claim_seq or the highest last_seq of
-- a receipt above it, and whether any receipt above the cache recorded gaps; also the ring's generation and
-- slot now (heal_lane() stores the generation as the lane's receipt generation). A pure read: only callers
-- that hold the lane's claim lock store the result (a store outside it could race one inside and regress).
-- Every receipt above the cache was written in the ring generation the receipt generation names or later
-- (see heal_lane()), and a receipt stays in the slot of its generation until prune moves it to the current
-- slot. So when the ring has not turned since that generation, the current slot holds them all and only its
-- partition is read; otherwise all sixteen are. The receipt generation is read BEFORE the cache, which is
-- stored before it: a reader racing a store pairs the new cache with the new generation, or either cache with
-- the old generation (an earlier bound, never a wrong one). A snapshot older than the stored generation's
-- rotation reads the ring behind it, and reads every partition.
-- (These helpers are PL/pgSQL, not SQL, so their statements' plans are cached per session: planning a
-- query over sixteen partitions on every call costs more than running it.)
-- Volatile, not stable: its read of the receipts is the first a claim makes of claim_batches (heal_lane()), so it
-- is the one that waits when a prune holds the slot it truncates. A stable function's statement runs on its
-- caller's snapshot, taken before that wait: it then read the truncated slot as empty (TRUNCATE is not MVCC-safe)
-- and not the receipts the prune carried into the current slot, so a lane whose newest receipt was carried healed
-- to a high-water below it, and the claim took that receipt's rows (carried too) a second time: two attempts of
-- one job at once (prune-snapshot.test.ts). A volatile function's statement takes its snapshot after its locks.
-- The lane functions below stay stable: every caller that decides from them (heal_lane() after this, cancel_job(),
-- held_in()) holds, from an earlier statement or the calling one, a lock on every partition of a ring table (a
-- generic plan locks them all), and a prune must lock its slot's partitions of all four: none can truncate under
-- them, and one that held its locks first was waited for before their snapshot.
create function {{schema}}.lane_high(p_lane {{schema}}.lanes, out high bigint, out gapped boolean,
    out generation bigint, out slot smallint)
  language plpgsql
  as $$
declare
  v_since bigint := coalesce(pg_sequence_last_value(p_lane.receipt_gen_seq), 0);
  v_cached bigint := coalesce(pg_sequence_last_value(p_lane.claim_seq), 0);
begin
  select r.generation, r.slot into generation, slot
    from {{schema}}.ring_rotations r order by r.generation desc limit 1;
  -- Two statements rather than one with "slot = this one, unless the ring turned": a condition that may be
  -- switched off prunes nothing, and the generic plan would read all sixteen partitions every time.
  if v_since = generation then
    select greatest(v_cached, coalesce(max(b.last_seq), 0)), coalesce(bool_or(b.gaps is not null), false)
      into high, gapped
      from {{schema}}.claim_batches b
     where b.slot = lane_high.slot and b.lane_id = p_lane.lane_id and b.last_seq > v_cached;
  else
    select greatest(v_cached, coalesce(max(b.last_seq), 0)), coalesce(bool_or(b.gaps is not null), false)
      into high, gapped
      from {{schema}}.claim_batches b where b.lane_id = p_lane.lane_id and b.last_seq > v_cached;
  end if;
end
$$;

-- How far a lane's positions were taken, for operator reads: its enqueue sequence on the primary. On a hot
-- standby the sequence reads as far as the primary last logged it, which runs up to 32 positions ahead of the
-- last one taken (nextval logs ahead), so every lane would count phantom available jobs there: the standby
-- reads the newest position a committed row holds instead (one index probe per partition).
create function {{schema}}.lane_enqueued(p_lane {{schema}}.lanes) returns bigint
  language plpgsql stable
  as $$
begin
  if not pg_is_in_recovery() then
    return coalesce(pg_sequence_last_value(p_lane.enqueue_seq), 0);
  end if;
  return coalesce((select max(r.lane_seq) from {{schema}}.ready_entries r where r.lane_id = p_lane.lane_id), 0);
end
$$;

-- The open gaps of a lane: positions in (floor, high] that receipts recorded as gaps and no receipt covers.
-- Receipts without gaps cover their whole range and never hold an open position, so only receipts with gaps
-- (a partial index) are read: their gaps, minus what each of them covers. Readers outside the claim lock may
-- pair a floor with an older high-water; that reads as no open gaps, which is never wrong for them.
create function {{schema}}.lane_open(p_lane_id int, p_floor bigint, p_high bigint) returns int8multirange
  language plpgsql stable
  as $$
declare
  v_open int8multirange;
begin
  if p_floor >= p_high then
    return '{}';
  end if;
  select coalesce(range_agg(g.r), '{}') into v_open
    from {{schema}}.claim_batches b, unnest(b.gaps) g(r)
   where b.lane_id = p_lane_id and b.gaps is not null and b.last_seq > p_floor;
  if isempty(v_open) then
    return v_open;
  end if;
  return (v_open - coalesce((select range_agg(c.r)
                               from {{schema}}.claim_batches b,
                                    unnest(int8multirange(int8range(b.first_seq, b.last_seq + 1)) - b.gaps) c(r)
                              where b.lane_id = p_lane_id and b.gaps is not null and b.last_seq > p_floor), '{}'))
       * int8multirange(int8range(p_floor + 1, p_high + 1));
end
$$;

-- The transaction ids of a lane's producers still in flight: those holding its 'producing' lock. Read from
-- pg_locks, one consistent view of the lock table. Every producer holds that lock from before it takes a
-- position until its transaction ends, so a producer of a position taken before this read either is listed
-- here or had ended already.
create function {{schema}}.lane_producer_xids(p_lane_id int) returns setof bigint
  language plpgsql volatile
  as $$
declare
  v_ref bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
  v_db oid := (select d.oid from pg_database d where d.datname = current_database());
  v_ns oid := ({{schema}}.lock_ns('producing')::bigint & 4294967295)::text::oid;
begin
  -- One read of pg_locks (each read copies the whole lock table), grouped by transaction: those holding the
  -- lane's producing lock, each with its top-level id (its smallest; pg_locks shows 32-bit xids, so each is
  -- placed next to v_ref first: running transactions are within 2^31 of it).
  return query
  select p.xid
    from (select bool_or(l.locktype = 'advisory' and l.objsubid = 2 and l.database = v_db and l.classid = v_ns
                         and l.objid = p_lane_id::bigint::text::oid) as producing,
                 min(v_ref - ((((v_ref & 4294967295) - l.transactionid::text::bigint) % 4294967296 + 6442450944)
                              % 4294967296 - 2147483648))
                   filter (where l.locktype = 'transactionid' and l.mode = 'ExclusiveLock') as xid
            from pg_locks l
           where l.granted and l.locktype in ('advisory', 'transactionid')
           group by l.virtualtransaction) p
   where p.producing and p.xid is not null;
end
$$;

-- A position's low 32 bits as an advisory-lock key (an int4), and back: the lock table shows the key as an
-- unsigned oid, placed here next to p_ref (the lane's last position; every block in flight lies within 2^32
-- below it).
create function {{schema}}.low_key(p_seq bigint) returns int
  language sql immutable parallel safe
  as $$ select ((p_seq & 4294967295) - case when p_seq & 2147483648 <> 0 then 4294967296 else 0 end)::int $$;

create function {{schema}}.from_low_key(p_key oid, p_ref bigint) returns bigint
  language sql immutable parallel safe
  as $$ select p_ref - (((p_ref & 4294967295) - p_key::text::bigint) % 4294967296 + 4294967296) % 4294967296 $$;

-- The positions of a lane's blocks whose producers are still in flight (reserve_lane() holds a lock naming
-- each block's first and last position until its transaction ends): none of them can show a row to a
-- statement that starts after this read, until that producer commits. A claimer skips them instead of
-- walking their index entries one by one, which for a COPY still streaming 100,000 rows took every claim of
-- its lane 20 ms. A hint, never evidence: positions skipped stay unclaimed, above the high-water or in open
-- gaps, and are read again later. One read of pg_locks; the i-th first and the i-th last of a transaction
-- belong together (its blocks of one lane never overlap).
create function {{schema}}.lane_inflight_blocks(p_lane_id int, p_ref bigint) returns int8multirange
  language plpgsql volatile
  as $$
declare
  v_db oid := (select d.oid from pg_database d where d.datname = current_database());
  v_first oid := ({{schema}}.lock_ns('block_first:' || p_lane_id)::bigint & 4294967295)::text::oid;
  v_last oid := ({{schema}}.lock_ns('block_last:' || p_lane_id)::bigint & 4294967295)::text::oid;
begin
  return coalesce((
    with held as materialized (
      select b.virtualtransaction as vxid, b.classid = v_first as is_first,
             {{schema}}.from_low_key(b.objid, p_ref) as pos
        from pg_locks b
       where b.locktype = 'advisory' and b.granted and b.objsubid = 2 and b.database = v_db
         and b.classid in (v_first, v_last)),
    ranked as (
      select h.vxid, h.is_first, h.pos, row_number() over (partition by h.vxid, h.is_first order by h.pos) as k
        from held h)
    select range_agg(int8range(f.pos, l.pos + 1))
      from ranked f join ranked l on l.vxid = f.vxid and l.k = f.k and not l.is_first
     where f.is_first and l.pos >= f.pos), '{}');
end
$$;

-- The oldest of them, or the largest bigint when there is none. A gap recorded with a horizon at or below it
-- belongs to a producer that has ended; the caller must read row visibility AFTER this (a later statement
-- under READ COMMITTED), so a producer that ended before this read is seen committed or not at all.
create function {{schema}}.lane_producers(p_lane_id int) returns bigint
  language plpgsql volatile
  as $$
begin
  return coalesce((select min(x) from {{schema}}.lane_producer_xids(p_lane_id) x), 9223372036854775807);
end
$$;

-- The horizon of gaps a claimer has just seen (positions taken before this call and not visible to it):
-- one past the newest of the lane's producers in flight now, and past the claimer's own transaction. Every
-- owner of such a gap is either among those producers, so below the horizon, or ended before this read,
-- so its outcome is visible to any snapshot a later claim reads the gap in. The claimer's own id keeps a
-- gap from being judged in a snapshot of the transaction that recorded it (REPEATABLE READ would give one
-- taken before those producers ended).
create function {{schema}}.lane_gap_horizon(p_lane_id int) returns bigint
  language plpgsql volatile
  as $$
begin
  return 1 + greatest(pg_current_xact_id()::text::bigint,
                      (select max(x) from {{schema}}.lane_producer_xids(p_lane_id) x));
end
$$;

-- Gaps whose owners have all ended: those recorded with a horizon that no transaction that could own them has
-- reached (p_past: the oldest transaction that could still own one). An invisible position among them will
-- never become visible.
create function {{schema}}.lane_settled(p_lane_id int, p_floor bigint, p_past bigint) returns int8multirange
  language plpgsql stable
  as $$
begin
  return coalesce((select range_agg(g.r)
                     from {{schema}}.claim_batches b, unnest(b.gaps) g(r)
                    where b.lane_id = p_lane_id and b.gaps is not null and b.last_seq > p_floor
                      and b.gap_horizon <= p_past), '{}');
end
$$;

-- True when a receipt covers position p of a lane (claimed, or consumed as cancelled). Off the hot path:
-- operator cancel and admin reads.
create function {{schema}}.lane_covers(p_lane_id int, p_seq bigint) returns boolean
  language plpgsql stable
  as $$
begin
  return exists (select 1 from {{schema}}.claim_batches b
                  where b.lane_id = p_lane_id and b.last_seq >= p_seq and b.first_seq <= p_seq
                    and (b.gaps is null or not b.gaps @> p_seq));
end
$$;

-- The spans of a lane's positions that no receipt covers: the run above its claimed high-water, and each open
-- gap below it, as [lo, hi). Each is meant to be read as its own index range (see slot_unclaimed()).
create function {{schema}}.lane_unclaimed_spans(p_lane {{schema}}.lanes) returns table (lo bigint, hi bigint)
  language sql stable
  as $$
    with h as (select x.high from {{schema}}.lane_high(p_lane) x)
    select h.high + 1, 9223372036854775807::bigint from h
    union all
    select lower(g), upper(g)
      from h, unnest({{schema}}.lane_open(p_lane.lane_id, coalesce(pg_sequence_last_value(p_lane.floor_seq), 0),
                                          h.high)) g
  $$;
