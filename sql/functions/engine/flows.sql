-- Flows and dependencies (tables: sql/migrations/023_flows.sql; docs/flows.md, "Dependencies").
--
-- enqueue_flow() writes a whole graph in one statement: the jobs nothing in it waits on go through enqueue() as
-- any job does; each dependent waits in deferred_jobs as 'blocked' (never due) with its edges in
-- job_dependencies. Every path that ends a job (settle_attempts(), place_settled()) hands the ended ids to
-- jobs_ended() (ended.sql), which calls resolve_dependencies(): the open edges on them take the outcome, and each dependent whose last open edge that
-- was is decided (decide_dependents()). Edges on a job of the same flow are written with that job, so they are
-- open before it can run and no end can pass them by; an edge on a job outside the flow (by id) may meet a job
-- that ends meanwhile, so the leader also resolves those (resolve_external_dependencies()).

-- What an ended job's state makes of its dependents' edges.
create function {{schema}}.edge_outcome(p_state text) returns text
  language sql immutable
  as $$
    select case p_state when 'completed' then 'completed' when 'cancelled' then 'cancelled'
                        when 'failed' then 'failed' when 'dlq' then 'failed' end
  $$;

-- Decides the blocked dependents whose edges have all resolved: released (due now, or at the run time the
-- dependent asked for: promotion then moves it to its lane), failed (an edge with on_failure 'fail' whose job did
-- not complete), or skipped, as a cancellation (an edge with on_failure 'skip' whose job did not complete). Each
-- dependent's lock (a transaction advisory lock on its id, taken in id order) is taken first: two settlers
-- resolving the last edges of one dependent take turns, and the one that goes second sees both edges resolved
-- (each statement here reads what committed before it began). The lock is the dependent's id, not its row, so a
-- writer that creates the blocked row can take it too. A dependent ended here ends through place_settled(),
-- which resolves its own dependents in turn.
create function {{schema}}.decide_dependents(p_dependents bigint[]) returns void
  language plpgsql
  as $$
declare
  v_ended {{schema}}.settled_job[];
begin
  perform pg_advisory_xact_lock({{schema}}.lock_ns('dependent'), (x.id % 2147483647)::int)
     from (select distinct d as id from unnest(p_dependents) d order by 1) x;
  with settled as (
    -- Those with no open edge left, each found by one probe of the open-edge index: a fan-in job's settled edges
    -- are not read again at every flush that resolves one more.
    select x.id from unnest(p_dependents) x(id)
     where not exists (select 1 from {{schema}}.job_dependencies w where w.job_id = x.id and w.outcome is null)
  ), decided as (
    select d.job_id,
           case when bool_or(d.outcome <> 'completed' and d.on_failure = 'fail') then 'failed'
                when bool_or(d.outcome <> 'completed' and d.on_failure = 'skip') then 'cancelled'
                else 'release' end as verdict,
           (array_agg(d.depends_on::text || ' ' || d.outcome order by d.depends_on)
              filter (where d.outcome <> 'completed' and d.on_failure <> 'run'))[1] as culprit
      from settled x
      join {{schema}}.deferred_jobs dj on dj.job_id = x.id and dj.state = 'blocked'
      join {{schema}}.job_dependencies d on d.job_id = x.id
     group by d.job_id
  ), released as (
    update {{schema}}.deferred_jobs dj
       set state = 'scheduled', run_at = greatest(now(), coalesce(fj.run_at, now()))
      from decided x left join {{schema}}.flow_jobs fj on fj.job_id = x.job_id
     where dj.job_id = x.job_id and x.verdict = 'release'
    returning dj.job_id
  ), gone as (
    delete from {{schema}}.deferred_jobs dj using decided x
     where dj.job_id = x.job_id and x.verdict <> 'release'
    returning dj.*, x.verdict,
              format('dependency %s %s', split_part(x.culprit, ' ', 1), split_part(x.culprit, ' ', 2)) as why
  )
  select array_agg(row(g.job_id, g.run_lease, g.kind, g.queue, g.priority, g.args, g.attempt, g.max_attempts,
                       g.enqueued_at,
                       {{schema}}.with_error(g.meta, jsonb_build_object(
                         'attempt', g.attempt, 'at', now(), 'name', 'DependencyFailed',
                         'error', case g.verdict when 'failed' then g.why else 'skipped: ' || g.why end)),
                       g.verdict, null, g.why)::{{schema}}.settled_job)
    into v_ended
    from gone g;
  if v_ended is not null then
    perform {{schema}}.place_settled(v_ended);
  end if;
end
$$;

-- Resolves the open edges on jobs this transaction ended (p_states: each one's end, as job states say it) and
-- decides the dependents whose last open edge that was. One probe of the open-edge index when no flow waits.
create function {{schema}}.resolve_dependencies(p_job_ids bigint[], p_states text[]) returns void
  language plpgsql
  as $$
declare
  v_dependents bigint[];
begin
  if coalesce(cardinality(p_job_ids), 0) = 0
     or not exists (select 1 from {{schema}}.job_dependencies d where d.outcome is null) then
    return;
  end if;
  with hit as (
    update {{schema}}.job_dependencies d
       set outcome = {{schema}}.edge_outcome(e.state)
      from unnest(p_job_ids, p_states) as e(job_id, state)
     where d.depends_on = e.job_id and d.outcome is null and {{schema}}.edge_outcome(e.state) is not null
    returning d.job_id
  )
  select array_agg(distinct h.job_id) into v_dependents from hit h;
  if v_dependents is not null then
    perform {{schema}}.decide_dependents(v_dependents);
  end if;
end
$$;

-- Edges on jobs outside their flow whose job has ended: resolved by the leader, at most p_limit a call (the
-- settling statement resolves them too when it comes after the edge committed). Returns how many.
create function {{schema}}.resolve_external_dependencies(p_limit int) returns int
  language plpgsql
  as $$
declare
  v_ids bigint[];
  v_states text[];
begin
  if not exists (select 1 from {{schema}}.job_dependencies d where d.outcome is null and d.external) then
    return 0;
  end if;
  select array_agg(x.depends_on), array_agg(x.state) into v_ids, v_states
    from (select distinct d.depends_on, (select s.state from {{schema}}.job_state(d.depends_on) s) as state
            from {{schema}}.job_dependencies d
           where d.outcome is null and d.external
           limit p_limit) x
   where {{schema}}.edge_outcome(x.state) is not null;
  perform {{schema}}.resolve_dependencies(v_ids, v_states);
  return coalesce(cardinality(v_ids), 0);
end
$$;

-- Writes a flow: its jobs in the arrays enqueue() takes plus their names, and its edges (p_edge_from depends on
-- p_edge_to, both 1-based positions in the jobs, or on the job p_edge_ids names outside the flow where p_edge_to
-- is null). The caller checked the graph (names, no cycles, no unique jobs). Returns the flow id and each job's
-- id, in input order. An edge on an outside job that has ended already starts resolved; one on a job that does
-- not exist (or is past retention) is refused. Set-based throughout: the input arrays are read with unnest(),
-- never subscripted in a statement (an element of a text or jsonb array is found by walking it, and an array
-- variable subscripted in a statement is flattened again for every row: O(n²) for a large flow, 1.2 s for the
-- edges of a 20,000-job fan-in); the ids are zipped with the rows they belong to, or joined by position. Only
-- PL/pgSQL's own loops index the (expanded) id array.
create function {{schema}}.enqueue_flow(p_name text, p_names text[], p_kinds text[], p_queues text[],
    p_priorities smallint[], p_args jsonb[], p_max_attempts smallint[], p_run_ats timestamptz[], p_metas jsonb[],
    p_edge_from int[], p_edge_to int[], p_edge_ids bigint[], p_edge_policies text[])
  returns table (flow_id bigint, job_id bigint)
  language plpgsql
  as $$
declare
  v_flow bigint;
  v_n int := cardinality(p_names);
  v_ids bigint[];
  v_roots int[];
  v_root_ids bigint[];
  v_dependents int[] := array(select distinct f from unnest(coalesce(p_edge_from, '{}')) f order by 1);
  r record;
  v_pos int;
  v_missing bigint;
  v_now timestamptz := now();
begin
  insert into {{schema}}.flows (name) values (p_name) returning flows.flow_id into v_flow;
  v_ids := array_fill(null::bigint, array[v_n]);
  -- The jobs that wait on nothing (the roots) are enqueued as any job is; the others wait, blocked.
  select array_agg(j.pos::int order by j.pos) as pos, array_agg(j.kind order by j.pos) as kinds,
         array_agg(j.queue order by j.pos) as queues, array_agg(j.priority order by j.pos) as priorities,
         array_agg(j.args order by j.pos) as args, array_agg(j.max_attempts order by j.pos) as max_attempts,
         array_agg(j.run_at order by j.pos) as run_ats, array_agg(j.meta order by j.pos) as metas
    into r
    from unnest(p_kinds, p_queues, p_priorities, p_args, p_max_attempts, p_run_ats, p_metas)
           with ordinality as j(kind, queue, priority, args, max_attempts, run_at, meta, pos)
   where j.pos::int not in (select unnest(v_dependents));
  v_roots := coalesce(r.pos, '{}');
  if cardinality(v_roots) > 0 then
    select array_agg(e.job_id order by e.ord) into v_root_ids
      from {{schema}}.enqueue(r.kinds, r.queues, r.priorities, r.args, r.max_attempts, r.run_ats, r.metas)
             with ordinality as e(job_id, inserted, ord);
    for i in 1..cardinality(v_roots) loop
      v_ids[v_roots[i]] := v_root_ids[i];
    end loop;
  end if;
  foreach v_pos in array v_dependents loop
    v_ids[v_pos] := nextval('{{schema}}.job_id_seq');
  end loop;
  insert into {{schema}}.deferred_jobs
    (job_id, kind, queue, priority, args, attempt, max_attempts, run_lease, run_at, state, enqueued_at, meta)
  select j.id, j.kind, j.queue, j.priority, j.args, 0, j.max_attempts, 0, 'infinity', 'blocked', v_now, j.meta
    from unnest(v_ids, p_kinds, p_queues, p_priorities, p_args, p_max_attempts, p_metas)
           with ordinality as j(id, kind, queue, priority, args, max_attempts, meta, pos)
    join unnest(v_dependents) d(pos) on d.pos = j.pos;
  insert into {{schema}}.flow_jobs (job_id, flow_id, name, run_at)
  select j.id, v_flow, j.name, case when d.pos is not null then j.run_at end
    from unnest(v_ids, p_names, p_run_ats) with ordinality as j(id, name, run_at, pos)
    left join unnest(v_dependents) d(pos) on d.pos = j.pos;
  select e.id into v_missing
    from unnest(p_edge_to, p_edge_ids) as e(pos, id)
   where e.pos is null and not exists (select 1 from {{schema}}.job_state(e.id));
  -- Asked again in a statement of its own before refusing: a ring slot pruned while the first one ran reads as
  -- empty to its snapshot (TRUNCATE), and the history the prune wrote is visible only to a later one.
  if found and not exists (select 1 from {{schema}}.job_state(v_missing)) then
    raise exception 'job % that a job of the flow depends on does not exist (or is past retention)', v_missing
      using errcode = '23503', column = 'dependsOn',
            hint = 'depend on a job that exists, or leave the dependency out';
  end if;
  insert into {{schema}}.job_dependencies (job_id, depends_on, on_failure, outcome, external)
  select f.id, coalesce(t.id, e.id), e.policy,
         case when e.to_pos is null then
           {{schema}}.edge_outcome((select s.state from {{schema}}.job_state(e.id) s)) end,
         e.to_pos is null
    from unnest(p_edge_from, p_edge_to, p_edge_ids, p_edge_policies) as e(from_pos, to_pos, id, policy)
    join unnest(v_ids) with ordinality as f(id, pos) on f.pos = e.from_pos
    left join unnest(v_ids) with ordinality as t(id, pos) on t.pos = e.to_pos;
  -- A dependent whose every edge is on outside jobs that ended already is decided now.
  if exists (select 1 from unnest(p_edge_to) t where t is null) then
    perform {{schema}}.decide_dependents(array(
      select x.id from unnest(v_ids) with ordinality as x(id, pos) join unnest(v_dependents) d(pos) on d.pos = x.pos));
  end if;
  return query select v_flow, x.id from unnest(v_ids) x(id);
end
$$;

-- A running job's children (ctx.spawn(), docs/flows.md "Children"): enqueues them into the job's flow (a new
-- flow named for the job when it has none) with an edge from the job to each, on_failure 'run' (the job hears how
-- each ended, whatever it was), and records step p_step of the job with their ids, in this one transaction: a
-- replay of the job finds the step and gets the same ids back, so a crash never spawns twice. Fenced as
-- record_step() is: an attempt that no longer holds the job spawns nothing ('closed'). Returns the status
-- ('spawned', 'replayed', 'closed', 'limit') and the children's ids in input order.
create function {{schema}}.spawn_children(p_slot smallint, p_batch bigint, p_idx int, p_job_id bigint,
    p_lease bigint, p_step text, p_max_steps int, p_names text[], p_kinds text[], p_queues text[],
    p_priorities smallint[], p_args jsonb[], p_max_attempts smallint[], p_run_ats timestamptz[], p_metas jsonb[])
  returns table (status text, job_id bigint)
  language plpgsql
  as $$
declare
  v_recorded jsonb;
  v_flow bigint;
  v_parent text;
  v_ids bigint[];
begin
  perform pg_advisory_xact_lock_shared({{schema}}.lock_ns('receipt'), (p_batch % 2147483647)::int);
  if {{schema}}.open_member_slot(p_slot, p_batch, p_idx, p_lease) is null then
    return query select 'closed'::text, null::bigint;
    return;
  end if;
  select s.result into v_recorded from {{schema}}.job_steps s where s.job_id = p_job_id and s.name = p_step;
  if found then
    return query select 'replayed'::text, x::bigint from jsonb_array_elements_text(v_recorded) x;
    return;
  end if;
  if (select count(*) from {{schema}}.job_steps c where c.job_id = p_job_id) >= p_max_steps then
    return query select 'limit'::text, null::bigint;
    return;
  end if;
  select fj.flow_id, fj.name into v_flow, v_parent from {{schema}}.flow_jobs fj where fj.job_id = p_job_id;
  if v_flow is null then
    insert into {{schema}}.flows (name) values ('children of job ' || p_job_id) returning flows.flow_id into v_flow;
    v_parent := 'job ' || p_job_id;
    insert into {{schema}}.flow_jobs (job_id, flow_id, name) values (p_job_id, v_flow, v_parent);
  end if;
  select array_agg(e.job_id order by e.ord) into v_ids
    from {{schema}}.enqueue(p_kinds, p_queues, p_priorities, p_args, p_max_attempts, p_run_ats, p_metas)
           with ordinality as e(job_id, inserted, ord);
  insert into {{schema}}.flow_jobs (job_id, flow_id, name)
  select n.id, v_flow, v_parent || '/' || n.name from unnest(v_ids, p_names) as n(id, name);
  insert into {{schema}}.job_dependencies (job_id, depends_on, on_failure, spawned)
  select p_job_id, x.id, 'run', true from unnest(v_ids) x(id);
  insert into {{schema}}.job_steps (job_id, name, result, run_lease)
    values (p_job_id, p_step, to_jsonb(array(select x::text from unnest(v_ids) x)), p_lease);
  return query select 'spawned'::text, x from unnest(v_ids) x;
end
$$;

-- Cancels what of a flow has not ended. Its blocked jobs go first and all at once, so none of them is decided
-- by the cancellation of another (a dependent whose edge says "run anyway" would be released, one that says
-- "skip" would be skipped rather than cancelled); then the rest, each through cancel_job(). Returns how many it
-- cancelled.
create function {{schema}}.cancel_flow(p_flow_id bigint, p_reason text) returns int
  language plpgsql
  as $$
declare
  v_blocked {{schema}}.settled_job[];
  v_job bigint;
  v_n int := 0;
begin
  with gone as (
    delete from {{schema}}.deferred_jobs dj using {{schema}}.flow_jobs fj
     where fj.flow_id = p_flow_id and dj.job_id = fj.job_id and dj.state = 'blocked'
    returning dj.*
  )
  select array_agg(row(g.job_id, g.run_lease, g.kind, g.queue, g.priority, g.args, g.attempt, g.max_attempts,
                       g.enqueued_at,
                       {{schema}}.with_error(g.meta, jsonb_build_object('attempt', g.attempt, 'at', now(),
                                                                        'error', p_reason)),
                       'cancelled', null, null)::{{schema}}.settled_job order by g.job_id)
    into v_blocked
    from gone g;
  if v_blocked is not null then
    perform {{schema}}.place_settled(v_blocked);
    v_n := cardinality(v_blocked);
  end if;
  for v_job in select fj.job_id from {{schema}}.flow_jobs fj where fj.flow_id = p_flow_id order by fj.job_id loop
    if {{schema}}.cancel_job(v_job, p_reason) is not null then
      v_n := v_n + 1;
    end if;
  end loop;
  return v_n;
end
$$;

-- The leader's pruning of flows (the cleanup service): a flow goes, with its jobs' names and edges, once none of
-- its jobs is found anywhere (job_state(): their history passed retention, DLQ entries purged). A flow with a job
-- still found (running, blocked, or ended but retained) stays. The flows found gone are judged again in a
-- statement of its own before they go, as holder_blocks() does (see there): a read that waited for a prune
-- truncating a job's slot found the job gone, and a flow whose job was running lost its names and edges
-- (prune-snapshot.test.ts). Bounded: it looks at the next p_limit flows (by id) after p_after created more than
-- p_min_age_secs ago, and returns how many it deleted and where to go on from (0: it reached the end).
create function {{schema}}.prune_flows(p_after bigint, p_limit int, p_min_age_secs int,
    out deleted bigint, out next_after bigint)
  language plpgsql
  set jit = off
  as $$
declare
  v_flows bigint[];
  v_gone bigint[];
begin
  v_flows := array(
    select f.flow_id from {{schema}}.flows f
     where f.flow_id > p_after and f.created_at < now() - make_interval(secs => p_min_age_secs)
     order by f.flow_id limit p_limit);
  next_after := case when cardinality(v_flows) < p_limit then 0 else v_flows[cardinality(v_flows)] end;
  v_gone := v_flows;
  for i in 1..2 loop
    v_gone := array(
      select x.id from unnest(v_gone) x(id)
       where not exists (select 1 from {{schema}}.flow_jobs fj
                          where fj.flow_id = x.id and exists (select 1 from {{schema}}.job_state(fj.job_id))));
  end loop;
  delete from {{schema}}.job_dependencies d
   using {{schema}}.flow_jobs fj where fj.flow_id = any(v_gone) and d.job_id = fj.job_id;
  with gone as (delete from {{schema}}.flows f where f.flow_id = any(v_gone) returning 1)
  select count(*) into deleted from gone;
end
$$;
