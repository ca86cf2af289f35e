-- The claim of a limited queue (docs/flow-control.md): claim() calls claim_limited(), which counts the slots
-- held (limit_holds.sql), lets jobs through the gate (limit_gate.sql), takes fresh rows from the lanes as any
-- claim does, and decides each receipt's members (sort_receipt()), under the queue's limits lock.

-- Decides the members of one receipt a claim took from the lanes: in member order, a member runs when its key
-- has no job waiting at the gate and still has room (counting those before it), and the queue still has room
-- (p_room). A member whose job holds its key's slot already (p_used_jobs: a strict FIFO key's job running again)
-- runs first, in that slot, whoever waits. The others are closed at once and wait at the gate, their attempt not
-- spent. Records the starts of those that run. Returns the receipt's JSON with null for each member that does not
-- run, how many run, their job ids and keys, and the hashes of the keys sent to the gate. p_job_ids, p_leases,
-- p_keys: the receipt's members in order (claim_lanes()). p_hold_keys, p_hold_counts: the slots held
-- (slots_used()), so a key's room is counted in memory, not looked up. p_gate_hashes: the hashes (hashtext())
-- of the keys with jobs waiting at the gate when the claim began, and of those it sent there since; p_gate_all:
-- those are all the keys that waited (else every key is looked for at the gate).
create function {{schema}}.sort_receipt(p_queue text, p_limits jsonb, p_slot smallint, p_batch bigint,
    p_jobs json, p_job_ids bigint[], p_leases bigint[], p_keys text[], p_room int, p_hold_keys text[],
    p_hold_counts int[], p_used_jobs bigint[], p_gate_hashes int[], p_gate_all boolean, p_now timestamptz,
    out jobs json, out n int, out run_jobs bigint[], out run_keys text[], out gated_hashes int[])
  language plpgsql
  as $$
declare
  v_cap int := (p_limits #>> '{perKey,concurrency}')::int;
  v_rate jsonb := p_limits #> '{perKey,rate}';
  -- Only a strict FIFO key's job can hold its slot before its claim (see held_members()).
  v_fifo boolean := coalesce((p_limits #>> '{perKey,fifo}')::boolean, false);
  v_runs boolean[];
begin
  -- Keys are compared bytewise (collate "C"): they are only grouped and matched, never shown in order, and the
  -- sorts by key were a large share of the decision with the locale's comparison.
  with m as (
    select u.idx::int, u.key collate "C" as key, v_fifo and u.job_id = any(p_used_jobs) as held
      from unnest(p_keys, p_job_ids) with ordinality u(key, job_id, idx)
  ), k as (
    select m.key, count(*) filter (where m.held)::int as held from m group by m.key
  ), rooms as (
    select k.key,
           least(coalesce(v_cap - u.n + k.held, 2147483647),
                 case when v_rate is null then 2147483647
                      else {{schema}}.rate_room(p_queue, 'key', k.key, v_rate, p_now) end) as room,
           -- A probe per key of limit_gate_hash, all its columns given (a scalar subquery with a limit is never
           -- turned into a scan of the whole gate; a generic plan of "gate_key = any(keys)" read every waiting
           -- job's entry and filtered it), and only for keys that were waiting when the claim began (jobs this
           -- claim let through may have emptied their key's queue there). Hashes, not keys, are compared with
           -- that list: one integer comparison each, where there can be hundreds of keys.
           (not p_gate_all or hashtext(k.key) = any(p_gate_hashes))
             and (select true from {{schema}}.deferred_jobs d
                   where d.state = 'available' and d.queue = p_queue and hashtext(d.gate_key) = hashtext(k.key)
                     and d.gate_key = k.key
                   limit 1) is not null as waiting
      from k join {{schema}}.slots_used(p_keys, p_hold_keys, p_hold_counts) u on u.key = k.key
  ), by_key as (
    select m.idx,
           (m.held or not r.waiting)
             and row_number() over (partition by m.key order by m.held desc, m.idx) <= r.room as fits
      from m join rooms r on r.key = m.key
  )
  select array_agg(d.runs order by d.idx) into v_runs
    from (select b.idx, b.fits and count(*) filter (where b.fits) over (order by b.idx) <= p_room as runs
            from by_key b) d;
  gated_hashes := '{}';
  if false = any(v_runs) then
    with gated as (
      select u.o::int as idx, u.elem, u.key
        from rows from (json_array_elements(p_jobs), unnest(p_keys), unnest(v_runs)) with ordinality
             as u(elem, key, runs, o)
       where not u.runs
    ), closure as (
      -- Closed at the claim's time, which its receipt records: a member closed 'settled' at its claim's own time
      -- is one its claim sent to the gate (any other closure is a later transaction's).
      insert into {{schema}}.closure_batches (slot, batch_id, idxs, n, outcome, closed_at)
      select p_slot, p_batch, range_agg(int4range(g.idx, g.idx + 1)), count(*), 'settled', p_now from gated g
    ), parked as (
      insert into {{schema}}.deferred_jobs
        (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta,
         gate_key)
      select (g.elem ->> 0)::bigint, g.elem ->> 1, p_queue, (g.elem ->> 6)::smallint, (g.elem -> 2)::jsonb,
             (g.elem ->> 3)::smallint - 1, (g.elem ->> 4)::smallint, (g.elem ->> 5)::bigint, 'infinity', 'available',
             to_timestamp((g.elem ->> 7)::float8 / 1000000), (g.elem -> 9)::jsonb, g.key
        from gated g
      returning gate_key
    )
    select array_agg(distinct hashtext(p.gate_key)) into gated_hashes from parked p;
  end if;
  run_jobs := array(select u.id from unnest(p_job_ids, v_runs) u(id, runs) where u.runs);
  run_keys := array(select u.key from unnest(p_keys, v_runs) u(key, runs) where u.runs);
  perform {{schema}}.record_starts(p_queue, p_limits, p_slot, p_batch,
    array(select u.idx::int from unnest(v_runs) with ordinality u(runs, idx) where u.runs), run_jobs,
    array(select u.lease from unnest(p_leases, v_runs) u(lease, runs) where u.runs), run_keys, p_now);
  n := cardinality(run_jobs);
  if n = cardinality(v_runs) then
    jobs := p_jobs;
  else
    jobs := (select json_agg(case when u.runs then u.elem end order by u.o)
               from rows from (json_array_elements(p_jobs), unnest(v_runs)) with ordinality as u(elem, runs, o));
  end if;
end
$$;

-- The claim of a limited queue (claim() calls it when the queue has limits). Same result as claim(), plus
-- retry_ms on a row without a batch when jobs wait at the gate: when to claim again (a rate's window opens
-- then; a slot held by another host's attempt frees at no time the claim can know, so at most 100 ms).
create function {{schema}}.claim_limited(p_queue text, p_limits jsonb, p_max int, p_instance text, p_aging_secs int,
    p_deadline_secs int, p_wait_ms int)
  returns table (batch_id bigint, claim_slot smallint, jobs json, bulk boolean, retry_ms int)
  language plpgsql
  set jit = off
  as $$
declare
  v_now timestamptz;
  v_fifo boolean := coalesce((p_limits #>> '{perKey,fifo}')::boolean, false);
  -- The slots held (not parked at the gate): keys with their counts, of the holds read and then of the starts
  -- this claim made (count 1 each: see slots_used()); how many the holds read; for a strict FIFO queue the job
  -- ids of both.
  v_hold_keys text[];
  v_hold_counts int[];
  v_hold_total int;
  v_used_jobs bigint[] := '{}';
  v_seen {{schema}}.limit_holds[];
  v_early record;
  v_late record;
  v_room int;
  v_left int;
  v_contended boolean := false;
  v_sorted record;
  -- Where a job's key is in its args (empty: nowhere, every job's key is its limitKey or '').
  v_key_path text[] := coalesce(string_to_array(p_limits #>> '{key,arg}', '.'), '{}');
  -- The keys waiting at the gate that this claim considers (gate_keys()); all of them while fewer than asked.
  v_gate_ask int := greatest(64, 2 * p_max);
  v_gate text[];
  v_gate_hashes int[];
  v_gate_all boolean;
  -- This claim sent fresh jobs to the gate: more may be runnable behind them in the lanes.
  v_gated boolean := false;
  v_opens timestamptz;
  b record;
begin
  -- Without strict FIFO, the holds are read before the lock, so that the fleet's claims read them side by side
  -- rather than in turn. Read early, a hold counts at least what it holds at the claim's turn (its members
  -- close at any time, never reopen: a slot freed meanwhile still counts as held, never one too many), and the
  -- only holds an early read misses are those of claims that committed meanwhile: they are read under the lock.
  if not v_fifo then
    v_seen := array(select h from {{schema}}.limit_holds h where h.queue = p_queue);
    v_early := {{schema}}.open_holds(v_seen);
  end if;
  perform pg_advisory_xact_lock({{schema}}.lock_ns('limits'), hashtext(p_queue));
  -- A start is logged at the moment its claim decides, once it holds the lock, and its receipts record that
  -- moment (claimed_at, through claim_time(): see record_receipt()). Not at the transaction's start: a claim
  -- waits its turn for the lock (tens of milliseconds under load, and a different wait for each claim), and a
  -- rate window reckoned from before that wait was that much, and that unevenly, ahead of its handlers' starts.
  -- The claims decide in turn, so the logged times follow their order.
  v_now := clock_timestamp();
  perform set_config('awa.claim_time', v_now::text, true);
  -- What holds a slot now; hold rows none of whose members does any more are given back.
  if v_fifo then
    v_late := {{schema}}.read_fifo_holds(p_queue);
    v_hold_keys := v_late.keys;
    v_hold_counts := v_late.counts;
    v_hold_total := v_late.total;
    v_used_jobs := v_late.job_ids;
  else
    v_late := {{schema}}.open_holds(array(
      select h from {{schema}}.limit_holds h
       where h.queue = p_queue and h.batch_id not in (select r.batch_id from unnest(v_seen) r)));
    delete from {{schema}}.limit_holds h where h.batch_id = any (v_early.gone || v_late.gone);
    v_hold_keys := v_early.keys || v_late.keys;
    v_hold_counts := v_early.counts || v_late.counts;
    v_hold_total := v_early.total + v_late.total;
  end if;
  -- The keys waiting at the gate that this claim considers (a bounded number: see gate_keys()).
  v_gate := array(select k.key from {{schema}}.gate_keys(p_queue, v_gate_ask) k);
  v_gate_all := cardinality(v_gate) < v_gate_ask;
  v_gate_hashes := array(select hashtext(k.key) from unnest(v_gate) k(key));
  v_room := greatest(0, least(p_max,
    coalesce((p_limits #>> '{queue,concurrency}')::int - v_hold_total, 2147483647),
    {{schema}}.rate_room(p_queue, 'queue', '', p_limits #> '{queue,rate}', v_now)));
  v_left := v_room;
  if v_left > 0 then
    for b in select * from {{schema}}.admit_gated(p_queue, p_limits, v_key_path, v_left, v_gate, v_hold_keys,
                                                  v_hold_counts, p_instance, p_deadline_secs, v_now) loop
      v_hold_keys := v_hold_keys || b.keys;
      v_hold_counts := v_hold_counts || array_fill(1, array[b.n]);
      if v_fifo then
        v_used_jobs := v_used_jobs || b.job_ids;
      end if;
      v_left := v_left - b.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := b.jobs;
      bulk := false;
      retry_ms := null;
      return next;
    end loop;
  end if;
  -- Fresh rows: one pass over the lanes (claim_lanes()), for what room is left. Once only per transaction: a
  -- lane's cursors are healed from the receipts this transaction sees, its own included, and stored at once
  -- (sequences ignore a rollback), so a second pass would store a high-water that a rolled-back claim's receipts
  -- made and skip their rows for good. A pass that sent jobs to the gate asks for the next claim at once.
  -- While jobs wait at the gate (a limit binds), the pass reads at least 64 rows, so a busy key's backlog ahead
  -- of other keys' jobs moves to the gate in a few claims even when little room is left; what it reads beyond
  -- the room waits at the gate and goes first next time.
  if v_left > 0 then
    for b in select * from {{schema}}.claim_lanes(p_queue,
                                                  case when exists (select 1 from {{schema}}.deferred_jobs d
                                                                     where d.state = 'available' and d.queue = p_queue)
                                                       then greatest(v_left, 64) else v_left end,
                                                  p_instance, p_aging_secs, p_deadline_secs, p_wait_ms, v_key_path) loop
      if b.batch_id is null then
        v_contended := true;
        continue;
      end if;
      v_sorted := {{schema}}.sort_receipt(p_queue, p_limits, b.claim_slot, b.batch_id, b.jobs, b.job_ids,
                                          b.leases, b.keys, v_left, v_hold_keys, v_hold_counts, v_used_jobs, v_gate_hashes,
                                          v_gate_all, v_now);
      v_gated := v_gated or v_sorted.n < cardinality(b.job_ids);
      v_gate_hashes := v_gate_hashes || v_sorted.gated_hashes;
      continue when v_sorted.n = 0;
      v_hold_keys := v_hold_keys || v_sorted.run_keys;
      v_hold_counts := v_hold_counts || array_fill(1, array[v_sorted.n]);
      if v_fifo then
        v_used_jobs := v_used_jobs || v_sorted.run_jobs;
      end if;
      v_left := v_left - v_sorted.n;
      batch_id := b.batch_id;
      claim_slot := b.claim_slot;
      jobs := v_sorted.jobs;
      bulk := b.bulk;
      retry_ms := null;
      return next;
    end loop;
  end if;
  if v_contended or exists (select 1 from {{schema}}.deferred_jobs d where d.state = 'available' and d.queue = p_queue) then
    -- The earliest a full rate window opens: the queue's, else the earliest of the waiting keys' whose window is
    -- full. (A key waiting for a slot has no time to give.)
    if {{schema}}.rate_room(p_queue, 'queue', '', p_limits #> '{queue,rate}', v_now) = 0 then
      v_opens := {{schema}}.rate_opens(p_queue, 'queue', '', p_limits #> '{queue,rate}', v_now);
    elsif p_limits #> '{perKey,rate}' is not null then
      v_opens := (select min({{schema}}.rate_opens(p_queue, 'key', k.key, p_limits #> '{perKey,rate}', v_now))
                    from unnest(v_gate) k(key)
                   where {{schema}}.rate_room(p_queue, 'key', k.key, p_limits #> '{perKey,rate}', v_now) = 0);
    end if;
    batch_id := null;
    claim_slot := null;
    jobs := null;
    bulk := null;
    retry_ms := case when v_contended then null
                     when v_gated and v_left > 0 then 1
                     else least(100, greatest(1, ceil(extract(epoch from coalesce(v_opens, v_now + interval '100 ms')
                                                                        - clock_timestamp()) * 1000)))::int end;
    return next;
  end if;
  -- Receipts written after this claim in the same transaction (a caller's own) are claimed at their own time.
  perform set_config('awa.claim_time', '', true);
end
$$;
