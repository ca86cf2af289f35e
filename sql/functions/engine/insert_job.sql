-- The SQL producer (docs/sql.md): insert_job() and insert_jobs() enqueue from SQL (a trigger, psql, any
-- language's driver) with the options, defaults, checks and unique keys of the TypeScript producer for a kind
-- it has no definition of (src/model/enqueue-options.ts), in the caller's transaction. Lanes, unique claims and
-- the scheduled/runnable split are the engine's own: scheduled and unique jobs go through enqueue(), a job
-- runnable now through reserve_lane(). A public API: the signatures change only under a new name or with a
-- major version.
--
-- Errors name the function and the field ("awa.insert_job: opts.priority must be ..."), carry the field alone
-- as the error's COLUMN (node-pg: err.column) and what to do as its HINT. SQLSTATEs:
--   22023 invalid_parameter_value     the kind, an option, or the call's shape is not one accepted;
--   22004 null_value_not_allowed      SQL NULL where a value is needed (kind, args, jobs);
--   22003 numeric_value_out_of_range  args or metadata hold a number JavaScript cannot hold (it would read
--                                     Infinity or 0);
--   54000 program_limit_exceeded      args over 1 MiB, or meta (metadata, tags, unique key) over 64 KiB, as
--                                     JSON.stringify would write them.
-- The checks run in the TypeScript producer's order (kind, args, then the options as buildJobRow() reads
-- them), so an input with several problems is refused for the same one. Each error is raised where it is
-- found, with RAISE ... USING: a helper that raised would put its call, source text and all, in every error's
-- CONTEXT.
--
-- Cost. PL/pgSQL sets up every expression it evaluates once per transaction, at a cost that grows with each
-- function in it, and a producer making one job per transaction pays that at every call. So checks come in two
-- kinds: cheap ones that can only accept (kind_ok(), opts_ok(), a jsonpath in js_int(): a jsonpath is one node
-- however much it checks), and exact ones, reached only when a cheap one does not accept, that count lengths
-- as JavaScript does, read numbers as doubles and say what is wrong (name_problem(), opts_problem(),
-- js_int_exact()). Helpers written in SQL are single expressions the planner inlines into their caller.

-- The checks and the row they build are in core/job_row.sql.

-- Enqueues one job; returns its id and true, or, for a duplicate of a unique job, the holder's id and false.
-- A job runnable now and not unique takes its position from reserve_lane() and is written here, as the
-- TypeScript producer writes one (src/storage/enqueue.ts): through enqueue() (arrays built and taken apart, a
-- set-returning call) it would cost half as much again. Scheduled and unique jobs go through enqueue().
create function {{schema}}.insert_job(p_kind text, p_args jsonb default '{}', p_opts jsonb default '{}')
  returns table (job_id bigint, inserted boolean)
  language plpgsql
  as $$
declare
  r record;
  v_queue text;
  v_priority smallint;
  v_max_attempts smallint;
  v_meta jsonb;
  v_run_ats timestamptz[];
  v_metas jsonb[];
begin
  if {{schema}}.plain_job(p_kind, p_args, p_opts) then
    v_queue := {{schema}}.opt_queue(p_opts);
    v_priority := {{schema}}.opt_priority(p_opts);
    v_max_attempts := {{schema}}.opt_max_attempts(p_opts);
  else
    r := {{schema}}.job_row(p_kind, p_args, p_opts, floor(extract(epoch from clock_timestamp()) * 1000)::bigint,
                            'insert_job', '');
    v_queue := r.queue;
    v_priority := r.priority;
    v_max_attempts := r.max_attempts;
    v_meta := r.meta;
    if r.run_at is not null or v_meta ? 'unique' then
      v_run_ats := array[r.run_at];
      v_metas := array[v_meta];
      return query select * from {{schema}}.enqueue(array[p_kind], array[v_queue], array[v_priority], array[p_args],
                                                    array[v_max_attempts], v_run_ats, v_metas);
      return;
    end if;
  end if;
  -- Values in variables, not expressions of the options: those would fold into constants in a custom plan,
  -- which PostgreSQL would then keep choosing, planning the statement again at every call.
  insert into {{schema}}.ready_entries (slot, lane_id, lane_seq, kind, queue, priority, args, max_attempts, meta)
  select l.slot, l.lane_id, l.first_seq, p_kind, v_queue, v_priority, p_args, v_max_attempts, v_meta
    from {{schema}}.reserve_lane(v_queue, v_priority, 1, false) l
  returning ready_entries.job_id into job_id;
  inserted := true;
  return next;
end
$$;

-- What is wrong with an element of insert_jobs()' array as a job's shape, as (field, problem); nulls when
-- nothing is (its kind, args and opts are job_row()'s to check).
create function {{schema}}.element_problem(p_job jsonb, p_at text, out field text, out problem text)
  language plpgsql stable
  as $$
begin
  if jsonb_typeof(p_job) <> 'object' then
    field := p_at;
    problem := 'must be an object {"kind": …, "args": …, "opts": …}, got ' || {{schema}}.producer_describe(p_job);
  elsif p_job - array['kind', 'args', 'opts'] <> '{}' then
    field := p_at || '.' || (select min(k) from jsonb_object_keys(p_job - array['kind', 'args', 'opts']) k);
    problem := 'is not a known field of a job (known: kind, args, opts)';
  elsif jsonb_typeof(p_job -> 'kind') is distinct from 'string' then
    field := p_at || '.kind';
    problem := 'must be a non-empty string, got ' || {{schema}}.producer_describe(p_job -> 'kind');
  end if;
end
$$;

-- Enqueues a JSON array of {kind, args, opts} in one call and one enqueue(): one row per job, in input order.
-- args defaults to {} and opts to none, as in insert_job(). A duplicate of an earlier job of the same call is
-- reported as that job (its id, inserted false).
create function {{schema}}.insert_jobs(p_jobs jsonb)
  returns table (job_id bigint, inserted boolean)
  language plpgsql
  as $$
declare
  v_now_ms bigint := floor(extract(epoch from clock_timestamp()) * 1000)::bigint;
  v_kinds text[] := '{}';
  v_queues text[] := '{}';
  v_priorities smallint[] := '{}';
  v_args jsonb[] := '{}';
  v_max_attempts smallint[] := '{}';
  v_run_ats timestamptz[] := '{}';
  v_metas jsonb[] := '{}';
  e record;
  v_shape record;
  r record;
begin
  if p_jobs is null or jsonb_typeof(p_jobs) <> 'array' then
    raise exception using errcode = case when p_jobs is null then '22004' else '22023' end, column = 'jobs',
      message = {{schema}}.producer_message('insert_jobs', 'jobs', case when p_jobs is null then 'must not be null'
                  else 'must be a JSON array, got ' || {{schema}}.producer_describe(p_jobs) end),
      hint = 'Pass a JSON array of {"kind": …, "args": …, "opts": …}, e.g. built with jsonb_agg(); ''[]'' for none.';
  end if;
  -- Read with jsonb_array_elements(), never p_jobs -> i in a loop: that walks the array every time.
  for e in select x.value as job, format('jobs[%s]', x.ord - 1) as at
             from jsonb_array_elements(p_jobs) with ordinality x(value, ord) loop
    v_shape := {{schema}}.element_problem(e.job, e.at);
    if v_shape.field is not null then
      raise exception using errcode = '22023', column = v_shape.field,
        message = {{schema}}.producer_message('insert_jobs', v_shape.field, v_shape.problem),
        hint = 'Each element is one job: {"kind": "send_email", "args": {…}, "opts": {…}}; args and opts are optional.';
    end if;
    r := {{schema}}.job_row(e.job ->> 'kind', coalesce(e.job -> 'args', '{}'), e.job -> 'opts', v_now_ms,
                            'insert_jobs', e.at || '.');
    v_kinds := v_kinds || r.kind;
    v_queues := v_queues || r.queue;
    v_priorities := v_priorities || r.priority;
    v_args := v_args || r.args;
    v_max_attempts := v_max_attempts || r.max_attempts;
    v_run_ats := v_run_ats || r.run_at;
    v_metas := v_metas || r.meta;
  end loop;
  if cardinality(v_kinds) > 0 then
    return query select * from {{schema}}.enqueue(v_kinds, v_queues, v_priorities, v_args, v_max_attempts,
                                                  v_run_ats, v_metas);
  end if;
end
$$;
