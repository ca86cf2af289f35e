-- Flow control's slots (docs/flow-control.md, "How it works"): a limited claim writes one hold row per receipt
-- (its members' job ids, leases and keys) and logs its starts for the rates; claims count the slots held from
-- those rows and the receipts' closures, and give back the rows none of whose members holds one any more.
-- The readers of the receipts here are volatile, not stable: a statement of a volatile function takes its
-- snapshot after the locks on the ring's partitions, one of a stable function before them (its caller's). A
-- read that waited for a prune's lock on a slot then saw the slot truncated (TRUNCATE is not MVCC-safe) and not
-- the receipts the prune carried forward: the holds in it looked given back, and were.

-- The receipts the hold rows p_rows name, each with its members as the row lists them, whether the receipt is
-- still in the ring (a receipt is gone only once all its members closed) and which of its members closed.
-- Set-based: every receipt is looked for and its closures read in one statement (a function call per receipt
-- locks every partition of the ring's tables each time it runs: 500 rows took 100 ms). It names only the tables
-- it needs: a statement locks every partition (and index) of each partitioned table it names, each time it runs.
create function {{schema}}.hold_receipts(p_rows {{schema}}.limit_holds[])
  returns table (batch_id bigint, idxs int[], job_ids bigint[], run_leases bigint[], keys text[], present boolean,
                 closed int4multirange)
  language plpgsql
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
  language plpgsql
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
  language plpgsql
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
  language plpgsql
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

-- How many attempts of each of p_keys hold a slot, as the claim counts them: p_hold_keys with p_hold_counts, the
-- holds it read (open_holds(), read_fifo_holds()) and the starts it made since (count 1 each); a key may come more
-- than once. Each key of p_keys once. Only the holds of p_keys are summed (a claim's keys are a few of those held).
create function {{schema}}.slots_used(p_keys text[], p_hold_keys text[], p_hold_counts int[])
  returns table (key text, n int)
  language sql immutable
  as $$
    select k.key, coalesce(sum(h.n), 0)::int
      from (select distinct u.key from unnest(p_keys) u(key)) k
      left join unnest(p_hold_keys, p_hold_counts) h(key, n) on h.key = k.key
     group by k.key
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
