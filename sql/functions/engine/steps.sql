-- Durable steps (docs/durable-steps.md): a handler's ctx.step(name, fn) and ctx.sleep() record one row per step
-- in job_steps, keyed by (job, name), and a later attempt of the job reads them back instead of running the step
-- again. Nothing here is on the claim/settle loop: a job whose handler never calls step() never reaches it.

-- Records step p_name of job p_job_id for the attempt (p_slot, p_batch, p_idx, p_lease), and returns what is
-- recorded under that name now:
--   recorded  this call wrote it (result, recorded_at: the row as written)
--   replayed  a row was there already (another attempt won the race): the winner's result
--   closed    the attempt no longer holds the job (settled, rescued, cancelled): nothing written
--   limit     the job holds p_max_steps steps already and none of this name: nothing written
-- The fence is the one progress and callbacks use (open_member_slot()), taken under the receipt's lock in
-- shared mode: settle_attempts() (completion, rescue, cancel) takes it exclusively to close a member, so a
-- closure either committed before this check (the member reads closed) or waits until this insert commits. A
-- stale attempt cannot record after its job was given to another. The primary key settles two attempts racing
-- on one name: the second insert waits for the first to commit and then reads its row.
create function {{schema}}.record_step(p_slot smallint, p_batch bigint, p_idx int, p_job_id bigint, p_lease bigint,
    p_name text, p_result jsonb, p_max_steps int,
    out status text, out result jsonb, out recorded_at timestamptz)
  language plpgsql
  set jit = off
  as $$
begin
  perform pg_advisory_xact_lock_shared({{schema}}.lock_ns('receipt'), (p_batch % 2147483647)::int);
  if {{schema}}.open_member_slot(p_slot, p_batch, p_idx, p_lease) is null then
    status := 'closed';
    return;
  end if;
  insert into {{schema}}.job_steps as s (job_id, name, result, run_lease)
  select p_job_id, p_name, p_result, p_lease
   where (select count(*) from {{schema}}.job_steps c where c.job_id = p_job_id) < p_max_steps
  on conflict (job_id, name) do nothing
  returning 'recorded', s.result, s.recorded_at into status, result, recorded_at;
  if found then
    return;
  end if;
  select 'replayed', s.result, s.recorded_at into status, result, recorded_at
    from {{schema}}.job_steps s where s.job_id = p_job_id and s.name = p_name;
  if not found then
    status := 'limit';
  end if;
end
$$;

-- record_step() for many attempts' steps at once (a host's step recorder, src/host/step-recorder.ts): one
-- transaction, so one commit for every step recorded in it rather than one each. The receipts' locks are taken
-- first, shared and in order, as settle_attempts() takes them exclusively, so the two cannot deadlock; each
-- record_step() then finds its lock held. Answers come back by input position (ord, from 1).
create function {{schema}}.record_steps(p_slots smallint[], p_batches bigint[], p_idxs int[], p_job_ids bigint[],
    p_leases bigint[], p_names text[], p_results jsonb[], p_max_steps int)
  returns table (ord int, status text, result jsonb, recorded_at timestamptz)
  language plpgsql
  set jit = off
  as $$
begin
  perform pg_advisory_xact_lock_shared({{schema}}.lock_ns('receipt'), (x.b % 2147483647)::int)
    from (select distinct b from unnest(p_batches) as b order by 1) x;
  return query
    select u.ord::int, r.status, r.result, r.recorded_at
      from unnest(p_slots, p_batches, p_idxs, p_job_ids, p_leases, p_names, p_results)
           with ordinality as u(slot, batch_id, idx, job_id, lease, name, result, ord)
      cross join lateral {{schema}}.record_step(u.slot, u.batch_id, u.idx, u.job_id, u.lease, u.name, u.result,
                                                p_max_steps) r
     order by u.ord;
end
$$;

-- The steps job p_job_id recorded, in the order they were recorded: read once by an attempt's first step()
-- (so a replay costs one round trip for all its steps), and by getJob().
create function {{schema}}.recorded_steps(p_job_id bigint)
  returns table (name text, result jsonb, recorded_at timestamptz, run_lease bigint)
  language sql stable
  set jit = off
  as $$
  select s.name, s.result, s.recorded_at, s.run_lease from {{schema}}.job_steps s
   where s.job_id = p_job_id order by s.recorded_at, s.name
$$;

-- The leader's pruning of steps (the cleanup service, after cleanup()): deletes the steps of jobs that are gone,
-- i.e. whose history passed retention (done_entries, completed history), whose DLQ entry was purged, or whose
-- queue was removed. "Gone" is job_state()'s answer (sql/functions/reads/admin.sql: the one rule of where a job
-- stands, which an operator's getJob() reads too): no row. A job it finds in any state (available, running,
-- scheduled, sleeping, retryable, parked, in the DLQ, finished but retained) keeps its steps: a DLQ retry replays
-- them. job_state() is stable, so every job is judged on its statement's one snapshot: a job moving from one table
-- to another is seen in one of them. The jobs found nowhere are judged again in a statement of its own before
-- their steps go, as holder_blocks() does (see there): a read that waited for a prune truncating a job's slot
-- found the job gone, and a running job lost the steps its next attempt would replay (prune-snapshot.test.ts).
-- Bounded: it looks at the next p_limit jobs (by id) after p_after whose newest step is older than
-- p_min_age_secs (no job is gone sooner than the shortest retention after its last step), and returns how many
-- rows it deleted and where to go on from (0: it reached the end; start again). Moving on over jobs it keeps
-- means a backlog of long sleepers never hides the finished jobs behind them.
create function {{schema}}.prune_steps(p_after bigint, p_limit int, p_min_age_secs int,
    out deleted bigint, out next_after bigint)
  language plpgsql
  set jit = off
  as $$
declare
  v_jobs bigint[];
begin
  v_jobs := array(
    select s.job_id from {{schema}}.job_steps s
     where s.job_id > p_after
     group by s.job_id
    having max(s.recorded_at) < now() - make_interval(secs => p_min_age_secs)
     order by s.job_id limit p_limit);
  next_after := case when cardinality(v_jobs) < p_limit then 0 else v_jobs[cardinality(v_jobs)] end;
  -- Each job judged once (twice when found nowhere), however many steps it recorded.
  for i in 1..2 loop
    v_jobs := array(select j.id from unnest(v_jobs) j(id)
                     where not exists (select 1 from {{schema}}.job_state(j.id)));
  end loop;
  with gone as (
    delete from {{schema}}.job_steps s where s.job_id = any(v_jobs)
    returning 1)
  select count(*) into deleted from gone;
end
$$;
