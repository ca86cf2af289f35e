-- Receipts: reading the members of a claim batch. A receipt is named by (claim slot, batch id); when prune
-- carried an open receipt forward out of a slot it truncated, receipt_forwards says where it lives now.

-- These two are PL/pgSQL, not SQL: a SQL function whose body holds a subquery is never inlined, and a SQL
-- function that is not inlined is planned again by every statement that calls it. For receipt_closed() that
-- meant planning a read of every closure_batches partition on each settle_attempts() call, more than half of a
-- one-result flush (0.5 of 0.9 ms). PL/pgSQL keeps the plan for the session; a generic one, pruned to the
-- receipt's partition when it runs, under settle_attempts(), which asks for generic plans.

-- The slot that holds receipt p_batch now, given the slot it was claimed in.
create function {{schema}}.receipt_slot(p_slot smallint, p_batch bigint) returns smallint
  language plpgsql stable
  as $$
begin
  return coalesce((select f.slot from {{schema}}.receipt_forwards f where f.batch_id = p_batch), p_slot);
end
$$;

-- The members of a receipt that closures name, as one multirange ('{}' when none).
create function {{schema}}.receipt_closed(p_slot smallint, p_batch bigint) returns int4multirange
  language plpgsql stable
  as $$
begin
  return coalesce((select range_agg(m) from {{schema}}.closure_batches c cross join lateral unnest(c.idxs) m
                    where c.slot = p_slot and c.batch_id = p_batch), '{}');
end
$$;

-- The slot of the receipt whose member p_idx is open at run lease p_lease, or null when that member is closed
-- (or was never claimed so). Volatile on purpose: a prune that carries the receipt forward while the member
-- is read makes the read wait, then find the old slot emptied; a second read of the receipt's slot, in a
-- statement of its own, sees the forward, and the member is read again where the receipt lives now.
-- The member is read as settle_attempts() reads it: its lease from the receipt row (the batch's lease, or its
-- entry in run_leases), its closure probed by index. Expanding the receipt (receipt_members()) and aggregating
-- every closure of it (receipt_closed()) cost 215 us a call on a 512-member receipt with 40 closures, against
-- 6.5 us; a handler's durable steps call this once per step.
create function {{schema}}.open_member_slot(p_slot smallint, p_batch bigint, p_idx int, p_lease bigint)
  returns smallint
  language plpgsql
  as $$
declare
  v_slot smallint := {{schema}}.receipt_slot(p_slot, p_batch);
  v_now smallint;
begin
  loop
    if exists (select 1 from {{schema}}.claim_batches b
                where b.slot = v_slot and b.batch_id = p_batch and p_idx between 1 and b.size
                  and coalesce(b.lease, b.run_leases[p_idx]) = p_lease)
       and not exists (select 1 from {{schema}}.closure_batches c
                        where c.slot = v_slot and c.batch_id = p_batch and c.idxs @> p_idx) then
      return v_slot;
    end if;
    v_now := {{schema}}.receipt_slot(p_slot, p_batch);
    if v_now = v_slot then
      return null;
    end if;
    v_slot := v_now;
  end loop;
end
$$;

-- Members of one claim batch, expanded: idx -> ready row key and run lease. The stored arrays, when
-- present, are unnested once rather than subscripted per member (each subscript would detoast them).
-- PL/pgSQL on purpose: as an inlined SQL function its lane_seq would be a CASE expression, which a join to
-- ready_entries cannot use as an index condition (every member would scan its whole lane).
-- ROWS: a claim batch's size, as plans should expect it (the default, 1000, priced a join through every open
-- receipt's members far above what it reads, and past jit_above_cost).
create function {{schema}}.receipt_members(p_slot smallint, p_batch bigint)
  returns table (idx int, lane_id int, ready_slot smallint, lane_seq bigint, run_lease bigint)
  language plpgsql stable
  rows 64
  as $$
declare
  b {{schema}}.claim_batches;
begin
  select * into b from {{schema}}.claim_batches cb where cb.slot = p_slot and cb.batch_id = p_batch;
  if not found then
    return;
  end if;
  if b.lane_seqs is null and b.run_leases is null then
    return query select g.i::int, b.lane_id, b.ready_slot, b.first_seq + g.i - 1, b.lease
                   from generate_series(1, b.size) g(i);
  else
    return query select x.o::int, b.lane_id, b.ready_slot,
                        case when b.lane_seqs is null then b.first_seq + x.o - 1 else x.seq end,
                        coalesce(b.lease, x.lease)
                   from unnest(coalesce(b.lane_seqs, array_fill(null::bigint, array[b.size])),
                               coalesce(b.run_leases, array_fill(null::bigint, array[b.size])))
                        with ordinality x(seq, lease, o);
  end if;
end
$$;

-- Members of the given batch with no closure yet, with what routing them needs.
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

-- Receipts with a member no closure names yet (of one queue, or of all), and how many such members: the
-- receipts of the slots not tallied (a tallied slot's are all settled, see tally_slots()) and their closures,
-- each read once and joined, rather than every receipt's closures probed in turn.
-- ROWS: the claims a fleet has in flight at once, a few per host and queue (see receipt_members()).
create function {{schema}}.open_receipts(p_queue text)
  returns table (slot smallint, batch_id bigint, lane_id int, claimed_at timestamptz, open bigint)
  language plpgsql stable
  rows 32
  as $$
declare
  -- A variable, so the slots it names prune the partitions read.
  v_live smallint[] := {{schema}}.untallied_slots();
begin
  return query
    select b.slot, b.batch_id, b.lane_id, b.claimed_at, b.size - coalesce(c.n, 0)
      from {{schema}}.claim_batches b
      left join (select cc.slot, cc.batch_id, sum(cc.n) as n
                   from {{schema}}.closure_batches cc where cc.slot = any(v_live)
                  group by cc.slot, cc.batch_id) c
        on c.slot = b.slot and c.batch_id = b.batch_id
     where b.slot = any(v_live) and b.size > coalesce(c.n, 0)
       and (p_queue is null or b.lane_id in (select l.lane_id from {{schema}}.lanes l where l.queue = p_queue));
end
$$;
