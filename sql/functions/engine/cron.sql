-- Cron schedules. Hosts declare them in code and sync them here when they start (cron_sync); only the
-- maintenance leader fires them (cron_fire), having computed the due fire time itself (cron arithmetic lives in
-- the runtime, through a cron library, never here). A fire time is enqueued at most once: the job and the
-- schedule's last_fire_at are written in one transaction, under the schedule's row lock, and only when the
-- fire time is later than anything the schedule has handled.

-- The time format of meta.cron.fireAt (the same as JavaScript's Date.toISOString()).
create function {{schema}}.cron_iso(p_at timestamptz) returns text
  language sql immutable
  as $$ select to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

-- Syncs one host's declarations: upserts each schedule by name (declared_by = the instance, declared_at =
-- now; the definition columns are rewritten only when the hash differs), records the host as a declarer of
-- exactly these schedules, and prunes declarations of instances that are no longer live (no heartbeat for
-- p_staleness_secs, or stopped) of the schedules it declares. Schedules nobody declares are left alone (the
-- listing reports them). Returns one row per declared schedule: created, updated or unchanged.
create function {{schema}}.cron_sync(p_instance text, p_defs jsonb, p_staleness_secs int)
  returns table (cron_name text, action text)
  language plpgsql
  as $$
declare
  d record;
  v_old text;
  v_names text[];
begin
  for d in
    -- `expression`: the key hosts of the previous release send for `cron` (migration 019); drop it after.
    select x.name, coalesce(x.cron, x.expression) as cron, x.timezone, x.kind, x.queue, x.priority, x.args,
           x.max_attempts, x.meta, x.missed_fire, x.hash
      from jsonb_to_recordset(p_defs) as x(name text, cron text, expression text, timezone text, kind text,
             queue text, priority smallint, args jsonb, max_attempts smallint, meta jsonb, missed_fire text,
             hash text)
     order by x.name
  loop
    cron_name := d.name;
    insert into {{schema}}.cron_jobs as c (name, cron, timezone, kind, queue, priority, args, max_attempts,
                                           meta, missed_fire, hash, declared_by)
      values (d.name, d.cron, d.timezone, d.kind, d.queue, d.priority, d.args, d.max_attempts, d.meta,
              d.missed_fire, d.hash, p_instance)
      on conflict (name) do nothing;
    if found then
      action := 'created';
    else
      select c.hash into v_old from {{schema}}.cron_jobs c where c.name = d.name for update;
      if v_old = d.hash then
        update {{schema}}.cron_jobs c set declared_by = p_instance, declared_at = now() where c.name = d.name;
        action := 'unchanged';
      else
        update {{schema}}.cron_jobs c
           set cron = d.cron, timezone = d.timezone, kind = d.kind, queue = d.queue,
               priority = d.priority, args = d.args, max_attempts = d.max_attempts, meta = d.meta,
               missed_fire = d.missed_fire, hash = d.hash, declared_by = p_instance, declared_at = now()
         where c.name = d.name;
        action := 'updated';
      end if;
    end if;
    return next;
  end loop;
  v_names := array(select x.name from jsonb_to_recordset(p_defs) as x(name text));
  insert into {{schema}}.cron_declarations as cd (name, instance_id)
    select n, p_instance from unnest(v_names) n
    on conflict (name, instance_id) do update set declared_at = now();
  delete from {{schema}}.cron_declarations cd
   where cd.instance_id = p_instance and cd.name <> all(v_names);
  delete from {{schema}}.cron_declarations cd
   where cd.name = any(v_names) and cd.instance_id <> p_instance
     and not {{schema}}.cron_instance_live(cd.instance_id, p_staleness_secs);
end
$$;

create function {{schema}}.cron_instance_live(p_instance text, p_staleness_secs int) returns boolean
  language sql stable
  as $$
    select exists (select 1 from {{schema}}.runtime_instances ri
                    where ri.instance_id = p_instance and ri.stopped_at is null
                      and ri.heartbeat_at >= now() - make_interval(secs => p_staleness_secs))
  $$;

-- What the leader evaluates: every schedule that is not paused, with the instant it has been handled up to
-- (its last fire time, or its creation or last resume, whichever is latest) and the database's clock.
-- `expression` repeats `cron` for leaders of the previous release (migration 019); drop it after.
create function {{schema}}.cron_pending()
  returns table (cron_name text, cron text, timezone text, missed_fire text, hash text, kind text,
                 queue text, args text, unique_spec jsonb, handled_to timestamptz, db_now timestamptz,
                 expression text)
  language sql stable
  as $$
    select c.name, c.cron, c.timezone, c.missed_fire, c.hash, c.kind, c.queue, c.args::text,
           c.meta -> 'unique', greatest(coalesce(c.last_fire_at, c.created_at), c.resumed_at), now(), c.cron
      from {{schema}}.cron_jobs c
     where c.paused_at is null
     order by c.name
  $$;

-- Enqueues one job of schedule c: its kind, queue, priority, args and attempts, with the schedule's meta (its
-- own unique key dropped), meta.cron = p_cron, and meta.unique = p_unique when given.
create function {{schema}}.cron_enqueue(c {{schema}}.cron_jobs, p_cron jsonb, p_unique jsonb)
  returns table (job_id bigint, inserted boolean)
  language sql
  as $$
    select e.job_id, e.inserted
      from {{schema}}.enqueue(array[c.kind], array[c.queue], array[c.priority], array[c.args], array[c.max_attempts],
             array[null::timestamptz],
             array[(coalesce(c.meta, '{}'::jsonb) - 'unique') || jsonb_build_object('cron', p_cron)
                   || case when p_unique is null then '{}'::jsonb else jsonb_build_object('unique', p_unique) end]) e
  $$;

-- Fires one occurrence of a schedule, in one transaction: takes the schedule's row lock without waiting (a
-- row another session holds, a pause or a sync in flight, answers 'busy' and is evaluated again next tick),
-- then re-checks, under that lock, everything the caller's evaluation assumed:
--   paused_at is null         (a pause that committed after the evaluation wins: 'paused');
--   hash = p_hash             (the definition the evaluation used is still the stored one: else 'changed');
--   p_fire_at later than everything handled (last fire, creation, resume): else 'stale', so a fire time is
--                             enqueued at most once, whoever calls and however often.
-- With p_enqueue, the job is enqueued through enqueue() (meta.cron = { name, fireAt }; p_unique, when given,
-- is the job's meta.unique) and last_fire_at/last_job_id are set: 'fired', or 'duplicate' when the unique key
-- is held (last_job_id is then the holder). Without, the occurrence is recorded as skipped: last_fire_at
-- advances and no job is enqueued. If the queue's lanes do not exist yet and another session is creating them,
-- nothing is written ('lanes_busy').
create function {{schema}}.cron_fire(p_name text, p_fire_at timestamptz, p_hash text, p_enqueue boolean,
    p_unique jsonb)
  returns table (outcome text, job_id bigint)
  language plpgsql
  as $$
declare
  c {{schema}}.cron_jobs;
  v_job bigint;
  v_inserted boolean;
begin
  select * into c from {{schema}}.cron_jobs x where x.name = p_name for update skip locked;
  if not found then
    outcome := case when exists (select 1 from {{schema}}.cron_jobs x where x.name = p_name)
                    then 'busy' else 'missing' end;
    return next;
    return;
  end if;
  if c.paused_at is not null then
    outcome := 'paused';
  elsif c.hash <> p_hash then
    outcome := 'changed';
  elsif p_fire_at <= greatest(coalesce(c.last_fire_at, c.created_at), c.resumed_at) then
    outcome := 'stale';
  elsif not p_enqueue then
    update {{schema}}.cron_jobs x set last_fire_at = p_fire_at where x.name = p_name;
    outcome := 'skipped';
  elsif not {{schema}}.ensure_lanes(c.queue, false, false) then
    outcome := 'lanes_busy';
  else
    select e.job_id, e.inserted into v_job, v_inserted
      from {{schema}}.cron_enqueue(c, jsonb_build_object('name', c.name, 'fireAt', {{schema}}.cron_iso(p_fire_at)),
                                   p_unique) e;
    update {{schema}}.cron_jobs x set last_fire_at = p_fire_at, last_job_id = v_job where x.name = p_name;
    outcome := case when v_inserted then 'fired' else 'duplicate' end;
    job_id := v_job;
  end if;
  return next;
end
$$;

-- Enqueues one job of a schedule now, outside its fire times (last_fire_at is not touched; a paused schedule
-- can be triggered too): meta.cron = { name, manual: true, triggeredAt }. p_hash is the definition the caller
-- derived p_unique from ('changed' if it is no longer the stored one). Returns 'triggered' or 'duplicate'
-- (unique key held; job_id is the holder), or 'missing'.
create function {{schema}}.cron_trigger(p_name text, p_hash text, p_unique jsonb)
  returns table (outcome text, job_id bigint)
  language plpgsql
  as $$
declare
  c {{schema}}.cron_jobs;
  v_inserted boolean;
begin
  select * into c from {{schema}}.cron_jobs x where x.name = p_name;
  if not found then
    outcome := 'missing';
  elsif c.hash <> p_hash then
    outcome := 'changed';
  else
    perform {{schema}}.ensure_lanes(c.queue, true, false);
    select e.job_id, e.inserted into job_id, v_inserted
      from {{schema}}.cron_enqueue(c, jsonb_build_object('name', c.name, 'manual', true,
                                                         'triggeredAt', {{schema}}.cron_iso(now())),
                                   p_unique) e;
    outcome := case when v_inserted then 'triggered' else 'duplicate' end;
  end if;
  return next;
end
$$;

-- Pauses (p_paused) or resumes a schedule. A pause waits for a fire in flight to commit (a fire holds the row
-- lock for one short transaction), so once it returns no later fire of the schedule can commit until it is
-- resumed. Resume records resumed_at: occurrences that fell due while paused are not fired. Returns
-- 'paused' / 'resumed', 'unchanged' when it already was, or 'missing'.
create function {{schema}}.cron_set_paused(p_name text, p_paused boolean) returns text
  language plpgsql
  as $$
declare
  v_paused timestamptz;
begin
  select x.paused_at into v_paused from {{schema}}.cron_jobs x where x.name = p_name for update;
  if not found then
    return 'missing';
  end if;
  if p_paused and v_paused is null then
    update {{schema}}.cron_jobs x set paused_at = now() where x.name = p_name;
    return 'paused';
  elsif not p_paused and v_paused is not null then
    update {{schema}}.cron_jobs x set paused_at = null, resumed_at = now() where x.name = p_name;
    return 'resumed';
  end if;
  return 'unchanged';
end
$$;

-- Every schedule, with its declaration state: declarers = live instances declaring it; undeclared_since (null
-- while some live instance declares it) = the last time one of its declarers was heard from (stopped, last
-- heartbeat, or declared when its liveness row is gone), or its declared_at when no declaration remains.
-- `expression` repeats `cron` for operators of the previous release (migration 019); drop it after.
create function {{schema}}.cron_list(p_staleness_secs int)
  returns table (cron_name text, cron text, timezone text, kind text, queue text, priority smallint,
                 args jsonb, max_attempts smallint, meta jsonb, missed_fire text, hash text, declared_by text,
                 declared_at timestamptz, created_at timestamptz, paused_at timestamptz,
                 resumed_at timestamptz, last_fire_at timestamptz, last_job_id bigint, declarers int,
                 undeclared_since timestamptz, db_now timestamptz, expression text)
  language sql stable
  as $$
    select c.name, c.cron, c.timezone, c.kind, c.queue, c.priority, c.args, c.max_attempts, c.meta,
           c.missed_fire, c.hash, c.declared_by, c.declared_at, c.created_at, c.paused_at, c.resumed_at,
           c.last_fire_at, c.last_job_id, coalesce(d.live, 0)::int,
           case when coalesce(d.live, 0) = 0 then coalesce(d.last_seen, c.declared_at) end, now(), c.cron
      from {{schema}}.cron_jobs c
      left join lateral (
        select count(*) filter (where l.live) as live, max(l.seen) filter (where not l.live) as last_seen
          from (select ri.instance_id is not null and ri.stopped_at is null
                       and ri.heartbeat_at >= now() - make_interval(secs => p_staleness_secs) as live,
                       greatest(cd.declared_at, coalesce(ri.stopped_at, ri.heartbeat_at)) as seen
                  from {{schema}}.cron_declarations cd
                  left join {{schema}}.runtime_instances ri on ri.instance_id = cd.instance_id
                 where cd.name = c.name) l
      ) d on true
     order by c.name
  $$;

-- Deletes a schedule (and its declarations). A host that still declares it creates it again when it next
-- starts. Returns whether it existed.
create function {{schema}}.cron_remove(p_name text) returns boolean
  language plpgsql
  as $$
begin
  delete from {{schema}}.cron_declarations cd where cd.name = p_name;
  delete from {{schema}}.cron_jobs c where c.name = p_name;
  return found;
end
$$;
