-- Flow control (docs/flow-control.md): how the claim of a limited queue decides which jobs start. Every claim
-- of a limited queue runs under the queue's 'limits' lock, so the fleet's claims of it take turns and each one
-- sees every start and hold the previous ones wrote: the limits hold across hosts because they are decided in
-- one place, the database, one claim at a time.
--   per key:    at most perKey.concurrency attempts hold a slot of the key; at most perKey.rate starts;
--   per queue:  at most queue.concurrency attempts hold a slot of the queue; at most queue.rate starts.
-- A rate is a sliding window, exact: at most `limit` starts in any window of `periodMs`, and at most `burst` in
-- any window of periodMs * burst / limit (bursts bounded, smooth when burst is small).
-- A job's key: meta.limitKey (given at enqueue), else the args field limits.key.arg names (a dotted path), else ''
-- (limit_key()).
-- A claim first lets waiting jobs through the gate (oldest first per key, keys that have room), then takes
-- fresh rows from the lanes as any claim does and keeps those whose key has room and no job waiting at the
-- gate; the rest are closed at once and wait at the gate (deferred_jobs 'available', gate_key) until their key
-- has room. So a job over its limit is moved once, never claimed and snoozed in a loop.
-- This file: a queue's effective limits (declared, under an operator's override), its rates' windows, and
-- opening its gate when limits are lifted. The slots: limit_holds.sql; the gate: limit_gate.sql; the claim:
-- limit_claim.sql.

-- A job's key, as every claim of a limited queue reads it from the job's row: meta.limitKey, else the args field
-- at p_path (limits.key.arg split on dots; an empty path names no field), else ''. An expression the planner
-- inlines: no call per row.
create function {{schema}}.limit_key(p_meta jsonb, p_args jsonb, p_path text[]) returns text
  language sql immutable
  as $$
    select coalesce(p_meta ->> 'limitKey', case when cardinality(p_path) > 0 then p_args #>> p_path end, '')
  $$;

-- Effective limits: the declared ones, field by field under the operator's override (a null there removes
-- the field, a null section the section). Null when nothing is limited (a key alone limits nothing).
create function {{schema}}.limits_section(p_declared jsonb, p_override jsonb) returns jsonb
  language sql immutable
  as $$
    select case when jsonb_typeof(p_override) = 'null' then null
                else nullif(jsonb_strip_nulls(
                       coalesce(case when jsonb_typeof(p_declared) = 'object' then p_declared end, '{}')
                       || coalesce(case when jsonb_typeof(p_override) = 'object' then p_override end, '{}')), '{}')
           end
  $$;

create function {{schema}}.effective_limits(p_declared jsonb, p_override jsonb) returns jsonb
  language plpgsql immutable
  as $$
begin
  return (
    select case when l ? 'perKey' or l ? 'queue' then l end
      from (select jsonb_strip_nulls(jsonb_build_object(
                     'key', {{schema}}.limits_section(p_declared -> 'key', p_override -> 'key'),
                     'perKey', {{schema}}.limits_section(p_declared -> 'perKey', p_override -> 'perKey'),
                     'queue', {{schema}}.limits_section(p_declared -> 'queue', p_override -> 'queue'))) as l) x);
end
$$;

-- How many more starts a rate allows at p_now (no bound without a rate): its window's rows of the log, read
-- through the index (at most `limit` starts, so a bounded number of rows). Rows logged after p_now (a claim that
-- took the lock first though its transaction began later) count too.
create function {{schema}}.rate_room(p_queue text, p_scope text, p_key text, p_rate jsonb, p_now timestamptz)
  returns int
  language plpgsql stable
  as $$
declare
  v_limit int;
  v_burst int;
  v_period interval;
  v_in_period bigint;
  v_in_burst bigint;
begin
  if p_rate is null then
    return 2147483647;
  end if;
  v_limit := (p_rate ->> 'limit')::int;
  v_burst := coalesce((p_rate ->> 'burst')::int, v_limit);
  v_period := coalesce((p_rate ->> 'periodMs')::float8, 1000) * interval '1 millisecond';
  select coalesce(sum(s.n), 0), coalesce(sum(s.n) filter (where s.at > p_now - v_period * v_burst / v_limit), 0)
    into v_in_period, v_in_burst
    from {{schema}}.limit_starts s
   where s.queue = p_queue and s.scope = p_scope and s.key = p_key and s.at > p_now - v_period;
  return greatest(0, least(v_limit - v_in_period, v_burst - v_in_burst))::int;
end
$$;

-- When a rate allows a start again, if nothing else starts meanwhile: once the start that filled a window
-- leaves it (walking the window's rows newest first, the row at which their starts reach the limit).
create function {{schema}}.rate_opens(p_queue text, p_scope text, p_key text, p_rate jsonb, p_now timestamptz)
  returns timestamptz
  language plpgsql stable
  as $$
declare
  v_limit int := (p_rate ->> 'limit')::int;
  v_burst int := coalesce((p_rate ->> 'burst')::int, v_limit);
  v_period interval := coalesce((p_rate ->> 'periodMs')::float8, 1000) * interval '1 millisecond';
  v_full timestamptz;
  v_full_burst timestamptz;
begin
  select max(w.at) filter (where w.total >= v_limit), max(w.at) filter (where w.total >= v_burst)
    into v_full, v_full_burst
    from (select s.at, sum(s.n) over (order by s.at desc rows unbounded preceding) as total
            from {{schema}}.limit_starts s
           where s.queue = p_queue and s.scope = p_scope and s.key = p_key and s.at > p_now - v_period) w;
  return greatest(p_now, v_full + v_period, v_full_burst + v_period * v_burst / v_limit);
end
$$;

-- Sends the jobs waiting at a queue's gate back to its lanes (as promotion does, oldest first per priority):
-- its limits were lifted, so no claim would let them through. Returns how many.
create function {{schema}}.open_gate(p_queue text) returns int
  language plpgsql
  as $$
declare
  g record;
  v_total int := 0;
begin
  for g in
    with gone as (
      delete from {{schema}}.deferred_jobs d where d.state = 'available' and d.queue = p_queue returning d.*
    )
    select gone.priority,
           array_agg(row(gone.job_id, gone.kind, gone.args, gone.attempt, gone.max_attempts, gone.run_lease,
                         gone.enqueued_at, now(), gone.meta)::{{schema}}.job_body order by gone.job_id) as bodies
      from gone group by gone.priority order by gone.priority
  loop
    perform {{schema}}.append_ready(p_queue, g.priority, g.bodies);
    v_total := v_total + cardinality(g.bodies);
  end loop;
  return v_total;
end
$$;

-- After a queue's limits were written: with none left, its gate opens (open_gate()); with some, its gate lane
-- exists before a claim needs it.
create function {{schema}}.limits_changed(p_queue text) returns void
  language plpgsql
  as $$
begin
  if (select {{schema}}.effective_limits(s.limits_declared, s.limits_override) from {{schema}}.queue_settings s
       where s.queue = p_queue) is null then
    perform {{schema}}.open_gate(p_queue);
  else
    perform {{schema}}.gate_lane(p_queue);
  end if;
end
$$;

-- Sets (or, with null, clears) an operator's override of a queue's limits. Returns the effective limits.
create function {{schema}}.set_limits_override(p_queue text, p_override jsonb) returns jsonb
  language plpgsql
  as $$
declare
  v_effective jsonb;
begin
  insert into {{schema}}.queue_settings (queue, limits_override) values (p_queue, p_override)
  on conflict (queue) do update set limits_override = excluded.limits_override, updated_at = now()
  returning {{schema}}.effective_limits(queue_settings.limits_declared, queue_settings.limits_override)
    into v_effective;
  perform {{schema}}.limits_changed(p_queue);
  return v_effective;
end
$$;
