-- The public, read-only view of jobs: {{schema}}.jobs, one row per job with its body, in whichever plane holds
-- it now (docs/sql.md, "The jobs view"). For SQL users: ad-hoc reads, joins with application tables, reports.
-- Its columns are a stable API; how each plane is read is not.
--   id, state, kind, queue, priority, args, meta
--   attempt       attempts started so far (as every read counts them)
--   max_attempts
--   run_lease     the fencing token of the latest attempt (0 before the first)
--   enqueued_at   when the job was first enqueued
--   run_at        when it is or was due: a scheduled or retryable job's run time, a parked job's callback
--                 timeout, a ring job's ready time
--   claimed_at, claimed_by   the running or completed attempt's claim (from its receipt), while the ring holds it
--   finished_at   when it reached a terminal state (completed, failed, cancelled, dlq)
--   last_error    the newest record of meta.errors (null when none)
--   result        a completed job's stored result (job_results: what its handler returned, or its completing
--                 callback's payload), while its queue's result retention keeps it; null otherwise
-- A completed job whose body the ring has pruned (compact history keeps only its id) is not a row here:
-- {{schema}}.job_state(id) or completed_ids finds it.

-- The attempt of ready row r that its claim started (run lease r.run_lease + 1): when and by which instance
-- it was claimed (from its receipt) and, once settled, the closure's outcome and time; all null while r is
-- unclaimed. Candidate receipts are found through the lane's (lane_id, last_seq) index; a receipt's member
-- number is arithmetic unless it stored its positions. One record, not a set: the view calls it per row in
-- a branch's select list (a lateral join would make the branch a join, planned apart: see below).
create function {{schema}}.ring_attempt(r {{schema}}.ready_entries, out claimed_at timestamptz,
    out claimed_by text, out outcome text, out closed_at timestamptz)
  language plpgsql stable
  as $$
declare
  b {{schema}}.claim_batches;
  v_idx int;
begin
  for b in
    select * from {{schema}}.claim_batches cb
     where cb.lane_id = r.lane_id and cb.last_seq >= r.lane_seq and cb.first_seq <= r.lane_seq
  loop
    v_idx := case when b.lane_seqs is null then (r.lane_seq - b.first_seq + 1)::int
                  else array_position(b.lane_seqs, r.lane_seq) end;
    continue when v_idx is null or v_idx < 1 or v_idx > b.size
               or coalesce(b.lease, b.run_leases[v_idx]) is distinct from r.run_lease + 1;
    claimed_at := b.claimed_at;
    claimed_by := b.instance_id;
    select x.outcome, x.closed_at into outcome, closed_at
      from {{schema}}.closure_batches x
     where x.slot = b.slot and x.batch_id = b.batch_id and x.idxs @> v_idx
     limit 1;
    return;
  end loop;
end
$$;

-- Branches that read the ready ring's rows have no WHERE of their own: PostgreSQL flattens a UNION ALL branch
-- into the view's append only when it has none, and only a flattened branch can walk its table's job_id index
-- in the order a page asks for (one with a filter is planned apart: every row read, then sorted). So each says
-- whether a row belongs to it in a column, `shown`, and the view keeps the rows shown. Each branch's state is
-- a constant, so a read of one state skips the other branches when it is planned.
create view {{schema}}.jobs as
  select u.id, u.state, u.kind, u.queue, u.priority, u.args, u.attempt, u.max_attempts, u.run_lease,
         u.enqueued_at, u.run_at, u.claimed_at, u.claimed_by, u.finished_at, u.meta, u.meta -> 'errors' -> -1
           as last_error,
         -- Read per row shown (a subquery in the select list, not a join): the branches below stay flattened,
         -- and a page reads the results of its own rows only, each by the primary key.
         case when u.state = 'completed'
              then (select jr.result from {{schema}}.job_results jr where jr.job_id = u.id) end as result
    from (
      -- Off the ring: one table per state (off_ring_jobs).
      select o.job_id as id, o.state, o.kind, o.queue, o.priority, o.args, o.attempt, o.max_attempts,
             o.run_lease, o.enqueued_at, o.due_at as run_at, null::timestamptz as claimed_at,
             null::text as claimed_by, o.finished_at, o.meta, true as shown
        from {{schema}}.off_ring_jobs o
      union all
      -- Available: a ready row no receipt covers and no cancel tombstoned.
      select r.job_id, 'available'::text, r.kind, r.queue, r.priority, r.args, r.attempt::int,
             r.max_attempts::int, r.run_lease, r.enqueued_at, r.ready_at, null::timestamptz, null::text,
             null::timestamptz, r.meta,
             not {{schema}}.lane_covers(r.lane_id, r.lane_seq)
               and not exists (select 1 from {{schema}}.ready_tombstones t
                                where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)
        from {{schema}}.ready_entries r
      union all
      -- Running: the open members of open receipts (few: at most the fleet's permits and held jobs; this
      -- branch is a join, planned apart, and that costs little here).
      select r.job_id, 'running'::text, r.kind, r.queue, r.priority, r.args, r.attempt + 1, r.max_attempts::int,
             r.run_lease + 1, r.enqueued_at, r.ready_at, b.claimed_at, cb.instance_id, null::timestamptz, r.meta,
             true
        from {{schema}}.open_receipts(null) b
        join {{schema}}.claim_batches cb on cb.slot = b.slot and cb.batch_id = b.batch_id
        cross join lateral {{schema}}.receipt_members(b.slot, b.batch_id) m
        cross join lateral (select x.* from {{schema}}.ready_entries x
                             where x.slot = m.ready_slot and x.lane_id = m.lane_id and x.lane_seq = m.lane_seq
                             limit 1) r
       where (select 1 from {{schema}}.closure_batches c
               where c.slot = b.slot and c.batch_id = b.batch_id and c.idxs @> m.idx limit 1) is null
      union all
      -- Completed in the ring: a ready row whose claimed attempt closed as completed.
      select r.job_id, 'completed'::text, r.kind, r.queue, r.priority, r.args, r.attempt + 1,
             r.max_attempts::int, r.run_lease + 1, r.enqueued_at, r.ready_at, ({{schema}}.ring_attempt(r)).claimed_at,
             ({{schema}}.ring_attempt(r)).claimed_by, ({{schema}}.ring_attempt(r)).closed_at, r.meta,
             ({{schema}}.ring_attempt(r)).outcome is not distinct from 'completed'
        from {{schema}}.ready_entries r
    ) u
   where u.shown;

-- Completed jobs of which compact history keeps only the ids (their bodies pruned with their ring slot):
-- `ids @> <id>` reads the GiST index.
create view {{schema}}.completed_ids as
  select h.ids, l.queue, l.priority, h.attempt, h.run_lease, h.closed_at
    from {{schema}}.completed_history h join {{schema}}.lanes l on l.lane_id = h.lane_id;

-- Writes through the views are refused with what to use instead (a view of several planes has no one row
-- to change).
create function {{schema}}.jobs_read_only() returns trigger
  language plpgsql
  as $$
begin
  raise exception '%.% is read-only', tg_table_schema, tg_table_name
    using errcode = '42809',
          hint = format('Enqueue with %s.insert_job(); cancel, retry or remove jobs with the awa CLI, the '
                        'dashboard or AwaClient (docs/sql.md).', tg_table_schema);
end
$$;

create trigger jobs_read_only instead of insert or update or delete on {{schema}}.jobs
  for each row execute function {{schema}}.jobs_read_only();
create trigger completed_ids_read_only instead of insert or update or delete on {{schema}}.completed_ids
  for each row execute function {{schema}}.jobs_read_only();
