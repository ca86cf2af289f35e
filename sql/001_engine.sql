-- Awa storage engine v1.
--
-- {{schema}} is replaced by the (quoted) schema name when the migration runs; nothing else is templated.
--
-- Shape, in one paragraph: every hot table is list-partitioned by `slot` into a ring of 16 slots. Producers
-- append immutable job bodies (ready_entries) into the ring's current slot, one segment row per enqueue
-- call and lane. A claim appends ONE claim_batches row (the receipt plane: a lane range and a run lease)
-- per batch; a completion flush appends ONE closure_batches row per claim batch it settles. A receipt is open
-- while no closure names it. Lane cursors are sequences (non-transactional, no dead tuples). Rotation
-- appends to a ledger; prune proves a sealed slot spent and TRUNCATEs it. Nothing on the claim/complete
-- loop updates or deletes a row.

create schema if not exists {{schema}};

create table {{schema}}.schema_version (
  version    int primary key,
  name       text not null,
  applied_at timestamptz not null default now()
);

create sequence {{schema}}.job_id_seq as bigint cache 64;
create sequence {{schema}}.claim_batch_seq as bigint;

-- Lanes: one ordered stream per (queue, priority, shard). Cold registry: a row is inserted once, never
-- updated. The cursors live in two sequences per lane:
--   enqueue_seq: last lane_seq handed to a producer;
--   claim_seq:   claimed-through position (every lane_seq <= it has been emitted to a claim batch).
create table {{schema}}.lanes (
  lane_id     int generated always as identity primary key,
  queue       text not null,
  priority    smallint not null check (priority between 1 and 4),
  shard       smallint not null default 0,
  enqueue_seq regclass not null,
  claim_seq   regclass not null,
  created_at  timestamptz not null default now(),
  unique (queue, priority, shard)
);

-- Ring ledger: append-only; the current slot is the row with the highest generation.
create table {{schema}}.ring_rotations (
  generation bigint primary key,
  slot       smallint not null,
  rotated_at timestamptz not null default now()
);
insert into {{schema}}.ring_rotations (generation, slot) values (0, 0);

-- Immutable job bodies. attempt = attempts already made; run_lease = lease of the last attempt.
create table {{schema}}.ready_entries (
  slot         smallint not null,
  lane_id      int not null,
  lane_seq     bigint not null,
  job_id       bigint not null default nextval('{{schema}}.job_id_seq'),
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null default 0,
  max_attempts smallint not null default 25,
  run_lease    bigint not null default 0,
  enqueued_at  timestamptz not null default now(),
  ready_at     timestamptz not null default now(),
  meta         jsonb,
  primary key (lane_id, lane_seq, slot)
) partition by list (slot);

-- One row per committed enqueue range: lets prune prove a slot's ready rows are all claimed without
-- scanning the rows themselves.
create table {{schema}}.ready_segments (
  slot      smallint not null,
  lane_id   int not null,
  first_seq bigint not null,
  last_seq  bigint not null,
  created_at timestamptz not null default now()
) partition by list (slot);

-- "This lane_seq is dead" (an unclaimed job was cancelled). Slot = the ready row's slot.
create table {{schema}}.ready_tombstones (
  slot     smallint not null,
  lane_id  int not null,
  lane_seq bigint not null,
  job_id   bigint not null,
  reason   text not null,
  at       timestamptz not null default now(),
  primary key (lane_id, lane_seq, slot)
) partition by list (slot);

-- The receipt plane: one row per claim call and lane, naming a lane range rather than listing jobs, so
-- it stays a few dozen bytes however large the batch. Member i (1-based, i <= size) is the ready row at
-- lane_seq first_seq + i - 1 claimed with run lease `lease`; lane_seqs / run_leases are stored only when
-- that rule does not hold (tombstones or rolled-back gaps inside the range; mixed leases after retries).
-- first_seq..last_seq is the lane range this batch consumed, which is also the evidence that heals a
-- claim cursor that lags behind.
create table {{schema}}.claim_batches (
  slot        smallint not null,
  batch_id    bigint not null,
  lane_id     int not null,
  ready_slot  smallint not null,
  first_seq   bigint not null,
  last_seq    bigint not null,
  size        int not null,
  lease       bigint,
  lane_seqs   bigint[],
  run_leases  bigint[],
  instance_id text not null,
  claimed_at  timestamptz not null default now(),
  deadline_at timestamptz,
  primary key (batch_id, slot)
) partition by list (slot);

-- One row per (flush, claim batch, outcome class): which members of that batch are settled, as a
-- multirange of member indexes (completions arrive in near claim order, so this is usually one range).
-- Lives in the claim batch's slot, so a slot's receipts and their closures are truncated together.
-- outcome='completed' rows are also the compact success history.
create table {{schema}}.closure_batches (
  slot      smallint not null,
  batch_id  bigint not null,
  idxs      int4multirange not null,
  n         int not null,
  outcome   text not null,
  closed_at timestamptz not null default now()
) partition by list (slot);

-- Members of one claim batch, expanded: idx -> ready row key and run lease. The stored arrays, when
-- present, are unnested once rather than subscripted per member (each subscript would detoast them).
create function {{schema}}.receipt_members(p_slot smallint, p_batch bigint)
  returns table (idx int, lane_id int, ready_slot smallint, lane_seq bigint, run_lease bigint)
  language sql stable
  as $$
    select m.i, b.lane_id, b.ready_slot,
           case when b.lane_seqs is null then b.first_seq + m.i - 1 else m.seq end,
           coalesce(b.lease, m.lease)
      from {{schema}}.claim_batches b
      cross join lateral (
        select g.i::int as i, null::bigint as seq, null::bigint as lease
          from generate_series(1, b.size) g(i)
         where b.lane_seqs is null and b.run_leases is null
        union all
        select x.o::int, x.seq, x.lease
          from unnest(b.lane_seqs, b.run_leases) with ordinality x(seq, lease, o)
         where b.lane_seqs is not null or b.run_leases is not null) m
     where b.slot = p_slot and b.batch_id = p_batch
  $$;

do $ring$
declare
  s int;
  t text;
begin
  for s in 0..15 loop
    foreach t in array array['ready_entries', 'ready_segments', 'ready_tombstones', 'claim_batches', 'closure_batches'] loop
      execute format('create table {{schema}}.%I partition of {{schema}}.%I for values in (%s)', t || '_' || s, t, s);
    end loop;
    execute format('create index on {{schema}}.%I (lane_id, last_seq)', 'claim_batches_' || s);
    execute format('create index on {{schema}}.%I (ready_slot)', 'claim_batches_' || s);
    execute format('create index on {{schema}}.%I (batch_id)', 'closure_batches_' || s);
    execute format('create index on {{schema}}.%I (lane_id, last_seq)', 'ready_segments_' || s);
    -- job ids grow with time inside a slot, so a BRIN index makes id lookups cheap at almost no enqueue cost.
    execute format('create index on {{schema}}.%I using brin (job_id)', 'ready_entries_' || s);
  end loop;
end
$ring$;

-- Scheduled (future run_at, snoozed) and retryable (backoff) jobs: outside the claim path until the
-- maintenance leader promotes them into the ready ring.
create table {{schema}}.deferred_jobs (
  job_id       bigint primary key,
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null,
  max_attempts smallint not null,
  run_lease    bigint not null,
  run_at       timestamptz not null,
  state        text not null check (state in ('scheduled', 'retryable')),
  enqueued_at  timestamptz not null,
  meta         jsonb
);
create index deferred_jobs_due on {{schema}}.deferred_jobs (run_at);

-- Wide terminal rows for every non-success outcome (failed, cancelled). Not in the ring: failure history
-- must outlive ring prune, so the leader deletes rows past their retention instead.
create table {{schema}}.done_entries (
  job_id       bigint not null,
  run_lease    bigint not null,
  state        text not null check (state in ('failed', 'cancelled')),
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null,
  max_attempts smallint not null,
  enqueued_at  timestamptz not null,
  finished_at  timestamptz not null default now(),
  meta         jsonb,
  primary key (job_id, run_lease)
);
create index done_entries_finished on {{schema}}.done_entries (finished_at);

-- Per-queue settings the storage layer needs to route outcomes (cold: written when hosts start).
create table {{schema}}.queue_settings (
  queue       text primary key,
  dlq_enabled boolean not null default false,
  updated_at  timestamptz not null default now()
);

-- Operator hold: terminal failures of DLQ-enabled queues, with their last error and attempt history
-- (meta.errors). Retry re-enqueues with a fresh attempt counter; the leader applies retention.
create table {{schema}}.dlq_entries (
  job_id       bigint primary key,
  run_lease    bigint not null,
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null,
  max_attempts smallint not null,
  enqueued_at  timestamptz not null,
  dlq_at       timestamptz not null default now(),
  reason       text,
  meta         jsonb
);
create index dlq_entries_queue on {{schema}}.dlq_entries (queue, dlq_at);


-- ---------------------------------------------------------------------------------------------------
-- Functions. Advisory-lock keys are (namespace, id) pairs; the namespaces are derived from the schema
-- name so two Awa schemas in one database never contend.
-- ---------------------------------------------------------------------------------------------------

create function {{schema}}.lock_ns(purpose text) returns int
  language sql immutable parallel safe
  as $$ select hashtext('{{schema}}:' || purpose) $$;

create function {{schema}}.current_slot() returns smallint
  language sql stable
  as $$ select slot from {{schema}}.ring_rotations order by generation desc limit 1 $$;

-- Finds or creates a lane. Creation runs DDL (two sequences), once per lane, under a lock so two
-- producers creating the same lane do not race.
create function {{schema}}.ensure_lane(p_queue text, p_priority smallint, p_shard smallint)
  returns {{schema}}.lanes
  language plpgsql
  as $$
declare
  v_lane {{schema}}.lanes;
  v_enq text;
  v_claim text;
begin
  select * into v_lane from {{schema}}.lanes where queue = p_queue and priority = p_priority and shard = p_shard;
  if found then
    return v_lane;
  end if;
  perform pg_advisory_xact_lock({{schema}}.lock_ns('lanes'), 0);
  select * into v_lane from {{schema}}.lanes where queue = p_queue and priority = p_priority and shard = p_shard;
  if found then
    return v_lane;
  end if;
  v_enq := 'lane_enq_' || md5(p_queue || ':' || p_priority || ':' || p_shard);
  v_claim := 'lane_claim_' || md5(p_queue || ':' || p_priority || ':' || p_shard);
  execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_enq);
  execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_claim);
  -- Mark both as called at 0 so pg_sequence_last_value() reads 0, not null.
  perform setval(format('{{schema}}.%I', v_enq)::regclass, 0, true);
  perform setval(format('{{schema}}.%I', v_claim)::regclass, 0, true);
  insert into {{schema}}.lanes (queue, priority, shard, enqueue_seq, claim_seq)
    values (p_queue, p_priority, p_shard, format('{{schema}}.%I', v_enq)::regclass, format('{{schema}}.%I', v_claim)::regclass)
    returning * into v_lane;
  return v_lane;
end
$$;

-- Reserves p_count consecutive lane_seqs for one producer transaction and records the segment. The lane's
-- enqueue lock is held until that transaction ends, so lane ranges commit in order: a claimer that sees
-- row N knows every row below N is either visible or never will be.
create function {{schema}}.reserve_lane(p_queue text, p_priority smallint, p_shard smallint, p_count int,
    out lane_id int, out first_seq bigint, out slot smallint)
  language plpgsql
  as $$
declare
  v_lane {{schema}}.lanes;
begin
  v_lane := {{schema}}.ensure_lane(p_queue, p_priority, p_shard);
  perform pg_advisory_xact_lock({{schema}}.lock_ns('enqueue'), v_lane.lane_id);
  lane_id := v_lane.lane_id;
  first_seq := nextval(v_lane.enqueue_seq);
  if p_count > 1 then
    perform setval(v_lane.enqueue_seq, first_seq + p_count - 1, true);
  end if;
  slot := {{schema}}.current_slot();
  insert into {{schema}}.ready_segments (slot, lane_id, first_seq, last_seq)
    values (slot, lane_id, first_seq, first_seq + p_count - 1);
  perform pg_notify('awa:{{schema}}', p_queue);
end
$$;

-- Enqueues jobs given as parallel arrays, in one statement (so it is atomic on a client with or without
-- an open transaction). Runnable jobs go to the ready ring, one lane reservation per (queue, priority),
-- keeping input order within a lane; future ones go to deferred_jobs. Returns ids in input order.
create function {{schema}}.enqueue(p_kinds text[], p_queues text[], p_priorities smallint[], p_args jsonb[],
    p_max_attempts smallint[], p_run_ats timestamptz[], p_metas jsonb[])
  returns setof bigint
  language plpgsql
  as $$
declare
  v_n int := cardinality(p_kinds);
  v_ids bigint[];
  g record;
  v record;
begin
  select array_agg(nextval('{{schema}}.job_id_seq')) into v_ids from generate_series(1, v_n);
  insert into {{schema}}.deferred_jobs
    (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta)
  select v_ids[i], p_kinds[i], p_queues[i], p_priorities[i], p_args[i], 0, p_max_attempts[i], 0, p_run_ats[i],
         'scheduled', now(), p_metas[i]
    from generate_series(1, v_n) i
   where p_run_ats[i] > now();
  for g in
    select p_queues[i] as queue, p_priorities[i] as priority, array_agg(i order by i) as idx
      from generate_series(1, v_n) i
     where p_run_ats[i] is null or p_run_ats[i] <= now()
     group by 1, 2 order by 1, 2
  loop
    select * into v from {{schema}}.reserve_lane(g.queue, g.priority, 0::smallint, cardinality(g.idx));
    insert into {{schema}}.ready_entries (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, max_attempts, meta)
    select v.slot, v.lane_id, v.first_seq + u.o - 1, v_ids[u.i], p_kinds[u.i], g.queue, g.priority, p_args[u.i],
           p_max_attempts[u.i], p_metas[u.i]
      from unnest(g.idx) with ordinality as u(i, o);
  end loop;
  return query select unnest(v_ids);
end
$$;

-- Claimed-through position of a lane, healed from claim-batch evidence: the cursor sequence is advanced
-- lazily, so the newest claim batch may already cover more. Advancing a cursor to committed evidence is
-- always safe, even if the calling transaction later aborts.
create function {{schema}}.claimed_through(p_lane {{schema}}.lanes) returns bigint
  language plpgsql
  as $$
declare
  v_cursor bigint := coalesce(pg_sequence_last_value(p_lane.claim_seq), 0);
  v_evidence bigint;
begin
  select max(b.last_seq) into v_evidence
    from {{schema}}.claim_batches b where b.lane_id = p_lane.lane_id and b.last_seq > v_cursor;
  if v_evidence is not null then
    perform setval(p_lane.claim_seq, v_evidence, true);
    return v_evidence;
  end if;
  return v_cursor;
end
$$;

-- Claims up to p_max jobs of one queue. Lanes are taken in aged-priority order (a job's effective
-- priority improves by one level per p_aging_secs of waiting), each under a try-lock so concurrent
-- claimers skip a busy lane instead of queueing on it. Returns one row per claim batch with its jobs as a
-- JSON array (member i is element i): one text value to parse instead of hundreds of rows.
create function {{schema}}.claim(p_queue text, p_max int, p_instance text, p_aging_secs int, p_deadline_secs int)
  returns table (batch_id bigint, claim_slot smallint, jobs json)
  language plpgsql
  as $$
declare
  v_lane {{schema}}.lanes;
  v_slot smallint := {{schema}}.current_slot();
  v_left int := p_max;
  v_through bigint;
  v_head_slot smallint;
  v_batch bigint;
  v_jobs json;
  v_first bigint;
  v_last bigint;
  v_n int;
  v_seqs bigint[];
  v_leases bigint[];
  v_uniform boolean;
  v_has_tombstones boolean;
begin
  for v_lane in
    select l.*
      from {{schema}}.lanes l
      cross join lateral (select coalesce(pg_sequence_last_value(l.claim_seq), 0) as done) c
      left join lateral (
        select r.ready_at from {{schema}}.ready_entries r
         where r.lane_id = l.lane_id and r.lane_seq > c.done
         order by r.lane_seq limit 1) h on true
     where l.queue = p_queue
       and coalesce(pg_sequence_last_value(l.enqueue_seq), 0) > c.done
     order by greatest(1, l.priority - coalesce(floor(extract(epoch from now() - h.ready_at) / p_aging_secs), 0)),
              h.ready_at nulls last, l.lane_id
  loop
    exit when v_left <= 0;
    continue when not pg_try_advisory_xact_lock({{schema}}.lock_ns('claim'), v_lane.lane_id);
    v_through := {{schema}}.claimed_through(v_lane);
    select r.slot into v_head_slot from {{schema}}.ready_entries r
     where r.lane_id = v_lane.lane_id and r.lane_seq > v_through
     order by r.lane_seq limit 1;
    continue when v_head_slot is null;
    v_has_tombstones := exists (select 1 from {{schema}}.ready_tombstones t
                                 where t.slot = v_head_slot and t.lane_id = v_lane.lane_id and t.lane_seq > v_through);
    -- One batch reads one ready slot (the lane continues in the next slot on the next call), so a batch
    -- names exactly one ready slot and prune can tell which receipts pin which slot. The subquery's order
    -- feeds the aggregates in lane order.
    select min(r.lane_seq), max(r.lane_seq),
           count(*) filter (where not r.dead),
           array_agg(r.lane_seq) filter (where not r.dead),
           array_agg(r.run_lease + 1) filter (where not r.dead),
           json_agg(json_build_array(r.job_id::text, r.kind, r.args, r.attempt + 1, r.max_attempts, r.run_lease + 1,
                                     r.priority, date_part('epoch', r.enqueued_at) * 1000,
                                     date_part('epoch', r.ready_at) * 1000, r.meta)) filter (where not r.dead)
      into v_first, v_last, v_n, v_seqs, v_leases, v_jobs
      from (select r.*, (v_has_tombstones and exists (
                   select 1 from {{schema}}.ready_tombstones t
                    where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq)) as dead
              from {{schema}}.ready_entries r
             where r.slot = v_head_slot and r.lane_id = v_lane.lane_id and r.lane_seq > v_through
             order by r.lane_seq
             limit v_left) r;
    continue when v_first is null;
    v_batch := nextval('{{schema}}.claim_batch_seq');
    v_uniform := v_n > 0 and (select min(x) = max(x) from unnest(v_leases) x);
    -- A range of only tombstoned rows still gets its (empty) batch: that is the evidence moving the
    -- cursor past them.
    insert into {{schema}}.claim_batches
      (slot, batch_id, lane_id, ready_slot, first_seq, last_seq, size, lease, lane_seqs, run_leases,
       instance_id, deadline_at)
    values (v_slot, v_batch, v_lane.lane_id, v_head_slot, v_first, v_last, v_n,
            case when v_uniform then v_leases[1] end,
            case when v_last - v_first + 1 <> v_n then v_seqs end,
            case when not v_uniform and v_n > 0 then v_leases end,
            p_instance,
            case when p_deadline_secs > 0 then now() + make_interval(secs => p_deadline_secs) end);
    if v_n > 0 then
      v_left := v_left - v_n;
      batch_id := v_batch;
      claim_slot := v_slot;
      jobs := v_jobs;
      return next;
    end if;
  end loop;
end
$$;

-- Appends one error record to a job's meta.errors (the attempt history), keeping the newest 20.
create function {{schema}}.with_error(p_meta jsonb, p_error jsonb) returns jsonb
  language sql immutable
  as $$
    select case when p_error is null then p_meta
      else coalesce(p_meta, '{}'::jsonb) || jsonb_build_object('errors',
        (select coalesce(jsonb_agg(e order by o), '[]'::jsonb) from (
           select e, o from jsonb_array_elements(coalesce(p_meta -> 'errors', '[]'::jsonb) || jsonb_build_array(p_error))
             with ordinality as x(e, o) order by o desc limit 20) newest))
    end
  $$;

-- Settles attempts in one transaction (one completion-batcher flush). Each input row names a receipt
-- (claim slot, batch, member index) and the fencing token it was claimed with. A row is accepted only if
-- that receipt is still open and still holds that job at that run_lease; anything else is a stale writer
-- and is silently ignored. Returns the job ids that were accepted.
--   completed  -> closure only (compact success history)
--   retry      -> closure + deferred_jobs(retryable, attempt counted)
--   snooze     -> closure + deferred_jobs(scheduled, attempt not counted)
--   failed / cancelled -> closure + done_entries, or dlq_entries for failures of DLQ-enabled queues
create function {{schema}}.finish(p_slots smallint[], p_batches bigint[], p_idxs int[], p_job_ids bigint[],
    p_leases bigint[], p_outcomes text[], p_run_ats timestamptz[], p_errors jsonb[])
  returns table (job_id bigint)
  language plpgsql
  as $$
begin
  -- Serialises closers of the same receipt batch (completion vs rescue vs cancel); sorted, so two
  -- flushes that share batches cannot deadlock.
  perform pg_advisory_xact_lock({{schema}}.lock_ns('receipt'), (x.b % 2147483647)::int)
    from (select distinct b from unnest(p_batches) as b order by 1) x;
  return query
  with input as (
    select * from unnest(p_slots, p_batches, p_idxs, p_job_ids, p_leases, p_outcomes, p_run_ats, p_errors)
      as u(slot, batch_id, idx, job_id, run_lease, outcome, run_at, error)
  ), valid as (
    -- Member idx of a batch: arithmetic on the lane range in the common case; the stored arrays only
    -- when the claim recorded them.
    select distinct on (i.slot, i.batch_id, i.idx) i.*, b.ready_slot, b.lane_id,
           case when b.lane_seqs is null then b.first_seq + i.idx - 1 else b.lane_seqs[i.idx] end as lane_seq
      from input i
      join {{schema}}.claim_batches b on b.slot = i.slot and b.batch_id = i.batch_id
     where i.idx between 1 and b.size
       and coalesce(b.lease, b.run_leases[i.idx]) = i.run_lease
       and not exists (select 1 from {{schema}}.closure_batches c
                        where c.slot = i.slot and c.batch_id = i.batch_id and c.idxs @> i.idx)
  ), closure as (
    insert into {{schema}}.closure_batches (slot, batch_id, idxs, n, outcome)
    select v.slot, v.batch_id, range_agg(int4range(v.idx, v.idx + 1)), count(*),
           case when v.outcome = 'completed' then 'completed' else 'settled' end
      from valid v
     group by v.slot, v.batch_id, v.outcome = 'completed'
  ), body as (
    select v.*, r.kind, r.queue, r.priority, r.args, r.attempt as prior_attempt, r.max_attempts,
           r.enqueued_at, r.meta,
           (v.outcome = 'failed' and coalesce(q.dlq_enabled, false)) as to_dlq
      from valid v
      join {{schema}}.ready_entries r
        on r.slot = v.ready_slot and r.lane_id = v.lane_id and r.lane_seq = v.lane_seq
      left join {{schema}}.queue_settings q on q.queue = r.queue
     where v.outcome <> 'completed'
  ), to_deferred as (
    insert into {{schema}}.deferred_jobs
      (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta)
    select b.job_id, b.kind, b.queue, b.priority, b.args,
           case when b.outcome = 'retry' then b.prior_attempt + 1 else b.prior_attempt end,
           b.max_attempts, b.run_lease, b.run_at,
           case when b.outcome = 'retry' then 'retryable' else 'scheduled' end,
           b.enqueued_at, {{schema}}.with_error(b.meta, b.error)
      from body b where b.outcome in ('retry', 'snooze')
  ), to_done as (
    insert into {{schema}}.done_entries
      (job_id, run_lease, state, kind, queue, priority, args, attempt, max_attempts, enqueued_at, meta)
    select b.job_id, b.run_lease, b.outcome, b.kind, b.queue, b.priority, b.args, b.prior_attempt + 1,
           b.max_attempts, b.enqueued_at, {{schema}}.with_error(b.meta, b.error)
      from body b where b.outcome in ('failed', 'cancelled') and not b.to_dlq
  ), to_dlq as (
    insert into {{schema}}.dlq_entries
      (job_id, run_lease, kind, queue, priority, args, attempt, max_attempts, enqueued_at, reason, meta)
    select b.job_id, b.run_lease, b.kind, b.queue, b.priority, b.args, b.prior_attempt + 1, b.max_attempts,
           b.enqueued_at, b.error ->> 'error', {{schema}}.with_error(b.meta, b.error)
      from body b where b.to_dlq
    on conflict on constraint dlq_entries_pkey do nothing
  )
  select v.job_id from valid v;
end
$$;

-- Moves due deferred jobs into the ready ring, at most p_limit per call, as fresh lane rows (ready_at =
-- the time they fell due, so aging and pickup latency count from then). Returns how many moved.
create function {{schema}}.promote_due(p_limit int) returns int
  language plpgsql
  as $$
declare
  g record;
  v record;
  v_total int := 0;
begin
  for g in
    with due as (
      delete from {{schema}}.deferred_jobs d
       where d.job_id in (select x.job_id from {{schema}}.deferred_jobs x where x.run_at <= now()
                           order by x.run_at limit p_limit for update skip locked)
      returning d.*
    )
    select due.queue, due.priority,
           array_agg(row(due.*)::{{schema}}.deferred_jobs order by due.run_at, due.job_id) as rows
      from due group by due.queue, due.priority order by due.queue, due.priority
  loop
    select * into v from {{schema}}.reserve_lane(g.queue, g.priority, 0::smallint, cardinality(g.rows));
    insert into {{schema}}.ready_entries
      (slot, lane_id, lane_seq, job_id, kind, queue, priority, args, attempt, max_attempts, run_lease,
       enqueued_at, ready_at, meta)
    select v.slot, v.lane_id, v.first_seq + u.o - 1, u.job_id, u.kind, u.queue, u.priority, u.args, u.attempt,
           u.max_attempts, u.run_lease, u.enqueued_at, u.run_at, u.meta
      from unnest(g.rows::{{schema}}.deferred_jobs[]) with ordinality as u(job_id, kind, queue, priority, args,
             attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta, o);
    v_total := v_total + cardinality(g.rows);
  end loop;
  return v_total;
end
$$;

create function {{schema}}.slot_has_rows(p_slot smallint) returns boolean
  language sql stable
  as $$
    select exists (select 1 from {{schema}}.ready_entries where slot = p_slot)
        or exists (select 1 from {{schema}}.ready_segments where slot = p_slot)
        or exists (select 1 from {{schema}}.claim_batches where slot = p_slot)
        or exists (select 1 from {{schema}}.closure_batches where slot = p_slot)
        or exists (select 1 from {{schema}}.ready_tombstones where slot = p_slot)
  $$;

-- Appends a rotation to the ledger when the current slot has rows and the next one is empty. Returns the
-- new current slot, or null when it skipped (idle ring, busy incoming slot, or another rotator).
create function {{schema}}.rotate() returns smallint
  language plpgsql
  as $$
declare
  v_gen bigint;
  v_slot smallint;
  v_next smallint;
begin
  if not pg_try_advisory_xact_lock({{schema}}.lock_ns('ring'), 0) then
    return null;
  end if;
  select generation, slot into v_gen, v_slot from {{schema}}.ring_rotations order by generation desc limit 1;
  if not exists (select 1 from {{schema}}.ready_entries where slot = v_slot)
     and not exists (select 1 from {{schema}}.claim_batches where slot = v_slot) then
    return null;
  end if;
  v_next := (v_slot + 1) % 16;
  if {{schema}}.slot_has_rows(v_next) then
    return null;
  end if;
  insert into {{schema}}.ring_rotations (generation, slot) values (v_gen + 1, v_next);
  -- The ledger is append-only on the hot path; trimming its far past here is one small delete per
  -- rotation, off the claim/complete loop.
  delete from {{schema}}.ring_rotations where generation < v_gen - 64;
  return v_next;
end
$$;

-- Why a sealed slot cannot be truncated yet, or null when it is spent: every ready row in it has been
-- claimed, every receipt that reads it or lives in it is closed, and its success history is past
-- retention.
create function {{schema}}.slot_pinned_by(p_slot smallint, p_retention_secs int) returns text
  language plpgsql
  as $$
begin
  -- Rows past a lane's claim cursor pin the slot unless they are tombstoned (cancelled before claim).
  if exists (
    select 1
      from (select g.lane_id, max(g.last_seq) as last_seq from {{schema}}.ready_segments g
             where g.slot = p_slot group by g.lane_id) s
      join {{schema}}.lanes l on l.lane_id = s.lane_id
      cross join lateral (select {{schema}}.claimed_through(l) as through) c
     where s.last_seq > c.through
       and exists (select 1 from {{schema}}.ready_entries r
                    where r.slot = p_slot and r.lane_id = s.lane_id and r.lane_seq > c.through
                      and not exists (select 1 from {{schema}}.ready_tombstones t
                                       where t.slot = r.slot and t.lane_id = r.lane_id and t.lane_seq = r.lane_seq))) then
    return 'unclaimed_ready_rows';
  end if;
  if exists (
    select 1 from {{schema}}.claim_batches b
     where (b.ready_slot = p_slot or b.slot = p_slot)
       and b.size > (select coalesce(sum(c.n), 0) from {{schema}}.closure_batches c
                      where c.slot = b.slot and c.batch_id = b.batch_id)) then
    return 'open_receipts';
  end if;
  if p_retention_secs > 0 and exists (
    select 1 from {{schema}}.closure_batches c
     where c.slot = p_slot and c.closed_at > now() - make_interval(secs => p_retention_secs)) then
    return 'retained_history';
  end if;
  return null;
end
$$;

-- Truncates the oldest sealed slot once it is proven spent: cheap proof first, then ACCESS EXCLUSIVE
-- locks on the slot's partitions with a short lock_timeout (a claimer or reader in that slot wins; we
-- retry next tick), then the same proof again under the locks, then TRUNCATE. TRUNCATE reclaims the
-- space even while a long transaction pins the MVCC horizon.
create function {{schema}}.prune(p_retention_secs int, p_lock_timeout_ms int,
    out slot smallint, out outcome text)
  language plpgsql
  as $$
declare
  v_cur smallint;
  v_s smallint;
  i int;
  v_tables text;
begin
  if not pg_try_advisory_xact_lock({{schema}}.lock_ns('ring'), 0) then
    outcome := 'busy';
    return;
  end if;
  v_cur := {{schema}}.current_slot();
  for i in 1..15 loop
    v_s := ((v_cur + i) % 16)::smallint;
    exit when {{schema}}.slot_has_rows(v_s);
    v_s := null;
  end loop;
  if v_s is null then
    outcome := 'idle';
    return;
  end if;
  slot := v_s;
  outcome := {{schema}}.slot_pinned_by(v_s, p_retention_secs);
  if outcome is not null then
    return;
  end if;
  select string_agg(format('{{schema}}.%I', t || '_' || v_s), ', ') into v_tables
    from unnest(array['ready_entries', 'ready_segments', 'ready_tombstones', 'claim_batches', 'closure_batches']) t;
  perform set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  begin
    execute 'lock table ' || v_tables || ' in access exclusive mode';
  exception when lock_not_available then
    outcome := 'lock_busy';
    return;
  end;
  perform set_config('lock_timeout', '0', true);
  outcome := {{schema}}.slot_pinned_by(v_s, p_retention_secs);
  if outcome is not null then
    return;
  end if;
  execute 'truncate ' || v_tables;
  outcome := 'pruned';
end
$$;

-- Per-queue counts for operators and the demo. available is derived from lane cursors (it can
-- over-count rolled-back gaps and tombstones); running counts open receipts; completed counts the
-- success history still retained in the ring.
create function {{schema}}.queue_counts()
  returns table (queue text, available bigint, running bigint, scheduled bigint, retryable bigint,
                 completed bigint, failed bigint, cancelled bigint)
  language sql stable
  as $$
    with q as (
      select l.queue from {{schema}}.lanes l union select d.queue from {{schema}}.deferred_jobs d
      union select e.queue from {{schema}}.done_entries e
    ), avail as (
      select l.queue, sum(greatest(coalesce(pg_sequence_last_value(l.enqueue_seq), 0)
                                   - coalesce(pg_sequence_last_value(l.claim_seq), 0), 0))::bigint as n
        from {{schema}}.lanes l group by l.queue
    ), batches as (
      select b.slot, b.batch_id, l.queue, b.size
        from {{schema}}.claim_batches b join {{schema}}.lanes l on l.lane_id = b.lane_id
    ), closures as (
      select c.slot, c.batch_id, sum(c.n) as closed, sum(c.n) filter (where c.outcome = 'completed') as completed
        from {{schema}}.closure_batches c group by c.slot, c.batch_id
    ), receipts as (
      select b.queue, sum(b.size - coalesce(c.closed, 0))::bigint as running,
             sum(coalesce(c.completed, 0))::bigint as completed
        from batches b left join closures c on c.slot = b.slot and c.batch_id = b.batch_id
       group by b.queue
    )
    select q.queue,
           coalesce((select a.n from avail a where a.queue = q.queue), 0) - coalesce(
             -- the claim cursor lags by up to one batch per lane; subtract what the evidence already covers
             (select sum(b.last_seq - coalesce(pg_sequence_last_value(l.claim_seq), 0))
                from {{schema}}.lanes l
                cross join lateral (select max(cb.last_seq) as last_seq from {{schema}}.claim_batches cb
                                     where cb.lane_id = l.lane_id
                                       and cb.last_seq > coalesce(pg_sequence_last_value(l.claim_seq), 0)) b
               where l.queue = q.queue and b.last_seq is not null), 0)::bigint,
           coalesce((select r.running from receipts r where r.queue = q.queue), 0),
           (select count(*) from {{schema}}.deferred_jobs d where d.queue = q.queue and d.state = 'scheduled'),
           (select count(*) from {{schema}}.deferred_jobs d where d.queue = q.queue and d.state = 'retryable'),
           coalesce((select r.completed from receipts r where r.queue = q.queue), 0),
           (select count(*) from {{schema}}.done_entries e where e.queue = q.queue and e.state = 'failed'),
           (select count(*) from {{schema}}.done_entries e where e.queue = q.queue and e.state = 'cancelled')
      from q order by q.queue
  $$;
