-- A job's row as the SQL producer (engine/insert_job.sql) builds it: every check, default and meta rule of the
-- TypeScript producer (src/model/enqueue-options.ts, validation.ts, payload.ts, unique.ts) for a kind it has no
-- definition of, written in SQL. Errors, SQLSTATEs and the two kinds of checks (cheap ones that only accept,
-- exact ones that say what is wrong) are described at the top of engine/insert_job.sql.

-- An error message names the function and the field: "awa.insert_job: opts.priority must be ...".
create function {{schema}}.producer_message(p_fn text, p_field text, p_problem text) returns text
  language sql stable
  as $$
    select format('%s.%s: %s %s', trim(both '"' from '{{schema}}'), p_fn, p_field, p_problem)
  $$;

-- A value as an error message quotes it (describe() in src/model/validation.ts).
create function {{schema}}.producer_describe(p_value jsonb) returns text
  language sql stable
  as $$
    select case jsonb_typeof(p_value)
             when 'string' then case when length(p_value #>> '{}') > 40
                                     then to_jsonb(left(p_value #>> '{}', 40) || '…')::text
                                     else p_value::text end
             when 'array' then 'an array'
             when 'object' then 'an object'
             else coalesce(p_value::text, 'nothing')
           end
  $$;

-- A string's length as JavaScript counts it (UTF-16 code units: a character outside the BMP counts two).
create function {{schema}}.js_length(p_text text) returns int
  language sql immutable
  as $$
    select char_length(p_text) + case when octet_length(p_text) = char_length(p_text) then 0
                                      else char_length(regexp_replace(p_text, '[^\U00010000-\U0010FFFF]', '', 'g'))
                                 end
  $$;

-- What is wrong with a kind or queue name (validateName()), or null.
create function {{schema}}.name_problem(p_name text) returns text
  language sql immutable
  as $$
    select case when p_name = '' then 'must be a non-empty string, got ""'
                when octet_length(p_name) > 200 and {{schema}}.js_length(p_name) > 200
                  then 'must be at most 200 characters'
                when p_name ~ '[\u0001-\u001f\u007f-\u009f]' then 'must not contain control characters'
           end
  $$;

-- The integer a JSON number is in JavaScript (JSON.parse reads a double) when it is one from p_min to p_max;
-- else null. An integer as written, in range, is read at once; anything else (2.5, "2", or
-- 2.0000000000000001, which JavaScript reads as 2) is decided by js_int_exact().
create function {{schema}}.js_int(p_value jsonb, p_min bigint, p_max bigint) returns bigint
  language sql stable
  as $$
    select case when jsonb_path_exists(p_value,
                                       '$ ? (@.type() == "number" && @ == @.floor() && @ >= $min && @ <= $max)',
                                       jsonb_build_object('min', p_min, 'max', p_max), true)
                  then p_value::float8::bigint
                else {{schema}}.js_int_exact(p_value, p_min, p_max)
           end
  $$;

-- js_int() for any value: a number far outside the range, or too small for a double, is refused before it is
-- rounded (the cast would raise an error of its own); CASE, not AND, takes the branches in order.
create function {{schema}}.js_int_exact(p_value jsonb, p_min bigint, p_max bigint) returns bigint
  language plpgsql immutable
  as $$
begin
  return case when jsonb_typeof(p_value) is distinct from 'number' then null
              when p_value::numeric < p_min - 1 or p_value::numeric > p_max + 1 then null
              when p_value::numeric <> 0 and abs(p_value::numeric) < 1e-300 then null
              when p_value::float8 <> trunc(p_value::float8) then null
              when p_value::float8 between p_min and p_max then p_value::float8::bigint
         end;
end
$$;

-- An ISO 8601 timestamp with a time zone (…Z or …±hh:mm) as epoch milliseconds, JavaScript's precision
-- (digits past the millisecond are dropped); null when the value is not one. The shape is matched without
-- captures (a regular expression with captures costs a hundred times more) and the fields read by position.
create function {{schema}}.iso_epoch_ms(p_value jsonb) returns bigint
  language plpgsql stable
  as $$
declare
  v_text text := case when jsonb_typeof(p_value) = 'string' then p_value #>> '{}' end;
  v_rest text := substr(v_text, 17); -- after YYYY-MM-DDTHH:MI
  v_seconds text := '';
  v_zone text;
begin
  if v_text is null
     or v_text !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?([Zz]|[-+][0-9]{2}(:?[0-9]{2})?)$' then
    return null;
  end if;
  if left(v_rest, 1) = ':' then
    v_seconds := left(v_rest, 3);
    v_rest := substr(v_rest, 4);
    if left(v_rest, 1) = '.' then
      v_zone := ltrim(substr(v_rest, 2), '0123456789');
      v_seconds := v_seconds || left(v_rest, least(4, length(v_rest) - length(v_zone)));
      v_rest := v_zone;
    end if;
  end if;
  v_zone := v_rest;
  -- Field by field: the cast would raise an error of its own for 2026-02-30 or 25:00.
  if substr(v_text, 1, 4)::int < 1 or substr(v_text, 6, 2)::int not between 1 and 12 or substr(v_text, 9, 2)::int < 1
     or substr(v_text, 9, 2)::int > extract(day from make_date(substr(v_text, 1, 4)::int, substr(v_text, 6, 2)::int, 1)
                                              + interval '1 month - 1 day')
     or substr(v_text, 12, 2)::int > 23 or substr(v_text, 15, 2)::int > 59
     or (v_seconds <> '' and substr(v_seconds, 2, 2)::int > 59)
     or (length(v_zone) > 1 and (substr(v_zone, 2, 2)::int > 15 or right(v_zone, 2)::int > 59)) then
    return null;
  end if;
  return floor(extract(epoch from (left(v_text, 10) || ' ' || substr(v_text, 12, 5) || v_seconds || ' ' || v_zone)
                                  ::timestamptz) * 1000);
end
$$;

-- Whether a JSON value may break encodeArgs()'s rules (src/model/payload.ts): a number near a double's limits,
-- or text over p_limit bytes. jsonb's text is never shorter than JSON.stringify's (it puts spaces after : and ,
-- and keeps numbers as written), so a value within the limit as jsonb text is within it. Almost no value is
-- suspect, and payload_problem() is not called.
create function {{schema}}.payload_suspect(p_value jsonb, p_limit int) returns boolean
  language sql immutable
  as $$
    select octet_length(p_value::text) > p_limit
           or jsonb_path_exists(p_value, 'strict $.** ? (@.type() == "number"
                                  && (@ >= 1e308 || @ <= -1e308 || (@ != 0 && @ < 1e-307 && @ > -1e-307)))')
  $$;

-- What encodeArgs() would refuse in a suspect value, with its SQLSTATE, or nulls: a number a double cannot
-- hold, or more than p_limit bytes as JSON.stringify writes it. Any other JSON value is accepted (jsonb already
-- refuses U+0000 and lone surrogates, as encodeArgs() does).
create function {{schema}}.payload_problem(p_value jsonb, p_limit int, out code text, out problem text)
  language plpgsql stable
  as $$
declare
  v_n jsonb;
  v_bytes bigint;
begin
  -- The cast decides: PostgreSQL refuses exactly the numbers that would round to Infinity or to 0.
  for v_n in select jsonb_path_query(p_value, 'strict $.** ? (@.type() == "number" && (@ >= 1e308
               || @ <= -1e308 || (@ != 0 && @ < 1e-307 && @ > -1e-307)))') loop
    begin
      perform v_n::float8;
    exception when numeric_value_out_of_range then
      code := '22003';
      problem := format('holds the number %s, which JavaScript cannot hold (it would read %s)',
                        case when length(v_n::text) > 40 then left(v_n::text, 40) || '…' else v_n::text end,
                        case when abs(v_n::numeric) > 1 then 'Infinity' else '0' end);
      return;
    end;
  end loop;
  if octet_length(p_value::text) > p_limit then
    v_bytes := octet_length({{schema}}.canonical_json(p_value));
    if v_bytes > p_limit then
      code := '54000';
      problem := format('is %s bytes encoded as JSON; the limit is %s', v_bytes, p_limit);
    end if;
  end if;
end
$$;

-- What is wrong with the options' shape and names, or their queue, priority or maxAttempts, as (field, problem,
-- hint); nulls when nothing is. The others are checked where they are read.
create function {{schema}}.opts_problem(p_opts jsonb, out field text, out problem text, out hint text)
  language plpgsql stable
  as $$
declare
  v_known constant text[] :=
    array['queue', 'priority', 'runAt', 'delayMs', 'maxAttempts', 'metadata', 'tags', 'unique', 'limitKey'];
  v_queue jsonb := p_opts -> 'queue';
begin
  if jsonb_typeof(p_opts) <> 'object' then
    field := 'opts';
    problem := 'must be a JSON object, got ' || {{schema}}.producer_describe(p_opts);
    hint := 'Pass options as an object, e.g. ''{"queue": "mail", "priority": 1}''; ''{}'' for none.';
  elsif p_opts - v_known <> '{}' then
    field := 'opts.' || (select min(k) from jsonb_object_keys(p_opts - v_known) k);
    problem := 'is not a known option (known: ' || array_to_string(v_known, ', ') || ')';
    hint := 'Option names are the TypeScript producer''s, in camelCase: check the spelling.';
  elsif v_queue is not null
        and (jsonb_typeof(v_queue) <> 'string' or {{schema}}.name_problem(v_queue #>> '{}') is not null) then
    field := 'opts.queue';
    problem := case when jsonb_typeof(v_queue) = 'string' then {{schema}}.name_problem(v_queue #>> '{}')
                    else 'must be a non-empty string, got ' || {{schema}}.producer_describe(v_queue) end;
    hint := 'A queue is a name of 1 to 200 characters without control characters; leave it out for "default".';
  elsif p_opts ? 'priority' and {{schema}}.js_int(p_opts -> 'priority', 1, 4) is null then
    field := 'opts.priority';
    problem := 'must be an integer from 1 to 4, got ' || {{schema}}.producer_describe(p_opts -> 'priority');
    hint := 'Give 1 (most urgent), 2 (the default), 3 or 4.';
  elsif p_opts ? 'maxAttempts' and {{schema}}.js_int(p_opts -> 'maxAttempts', 1, 1000) is null then
    field := 'opts.maxAttempts';
    problem := 'must be an integer from 1 to 1000, got ' || {{schema}}.producer_describe(p_opts -> 'maxAttempts');
    hint := 'Give how many attempts the job may make before it fails for good (the default is 25).';
  end if;
end
$$;

-- An option's value once checked (as JavaScript reads the number: a double, rounded), or the default of a kind
-- the producer has no definition of (src/model/job-kind.ts).
create function {{schema}}.opt_queue(p_opts jsonb) returns text
  language sql immutable
  as $$ select coalesce(p_opts ->> 'queue', 'default') $$;

create function {{schema}}.opt_priority(p_opts jsonb) returns smallint
  language sql immutable
  as $$ select coalesce((p_opts -> 'priority')::float8::smallint, 2::smallint) $$;

create function {{schema}}.opt_max_attempts(p_opts jsonb) returns smallint
  language sql immutable
  as $$ select coalesce((p_opts -> 'maxAttempts')::float8::smallint, 25::smallint) $$;

-- Cheap checks (see the top of this file): true only when the value is surely valid; false sends it to the exact
-- check. A kind of at most 200 bytes is at most 200 UTF-16 code units.
create function {{schema}}.kind_ok(p_kind text) returns boolean
  language sql immutable
  as $$ select p_kind <> '' and octet_length(p_kind) <= 200 and p_kind !~ '[\u0001-\u001f\u007f-\u009f]' $$;

-- The options' names, queue, priority and maxAttempts (the others are checked where they are read).
create function {{schema}}.opts_ok(p_opts jsonb) returns boolean
  language sql immutable
  as $$
    select jsonb_path_exists(p_opts, '$ ? (@.type() == "object"
             && !exists(@.keyvalue() ? (@.key != "queue" && @.key != "priority" && @.key != "maxAttempts"
                                        && @.key != "runAt" && @.key != "delayMs" && @.key != "metadata"
                                        && @.key != "tags" && @.key != "unique" && @.key != "limitKey"))
             && (!exists(@.queue) || (@.queue.type() == "string" && @.queue != ""
                                      && !(@.queue like_regex "[\u0001-\u001f\u007f-\u009f]")))
             && (!exists(@.priority) || (@.priority.type() == "number" && @.priority == @.priority.floor()
                                         && @.priority >= 1 && @.priority <= 4))
             && (!exists(@.maxAttempts) || (@.maxAttempts.type() == "number"
                                            && @.maxAttempts == @.maxAttempts.floor()
                                            && @.maxAttempts >= 1 && @.maxAttempts <= 1000)))', '{}', true)
           and coalesce(octet_length(p_opts ->> 'queue'), 0) <= 200
  $$;

-- A job insert_job() writes itself, without job_row(): valid, runnable now, not unique, no meta (options among
-- queue, priority and maxAttempts). The commonest call, and job_row() would add much of its cost again.
create function {{schema}}.plain_job(p_kind text, p_args jsonb, p_opts jsonb) returns boolean
  language sql immutable
  as $$
    select {{schema}}.kind_ok(p_kind) and not {{schema}}.payload_suspect(p_args, 1048576)
           and (p_opts is null or p_opts = '{}'
                or ({{schema}}.opts_ok(p_opts)
                    and not p_opts ?| array['runAt', 'delayMs', 'metadata', 'tags', 'unique', 'limitKey']))
  $$;

-- One job's row for enqueue(): kind, args and options checked, defaults applied, meta built as encodeMeta()
-- builds it and the unique key as uniqueKey() derives it (src/model/unique.ts). p_now_ms is the producer's
-- clock (Date.now() in TypeScript); p_fn and p_at say where errors point ('insert_jobs', 'jobs[3].').
create function {{schema}}.job_row(p_kind text, p_args jsonb, p_opts jsonb, p_now_ms bigint, p_fn text, p_at text,
    out kind text, out queue text, out priority smallint, out args jsonb, out max_attempts smallint,
    out run_at timestamptz, out meta jsonb)
  language plpgsql stable
  as $$
declare
  v_field text := p_at || 'kind';
  v_problem text;
  v_check record;
  v_run_ms bigint;
  v_unique record;
  v_key text;
  v_states text[];
begin
  if p_kind is null or not {{schema}}.kind_ok(p_kind) then
    v_problem := case when p_kind is null then 'must not be null' else {{schema}}.name_problem(p_kind) end;
  end if;
  if v_problem is not null then
    raise exception using errcode = case when p_kind is null then '22004' else '22023' end, column = v_field,
      message = {{schema}}.producer_message(p_fn, v_field, v_problem),
      hint = 'Give the kind''s name as its handler registers it: 1 to 200 characters, no control characters.';
  end if;
  v_field := p_at || 'args';
  if p_args is null then
    raise exception using errcode = '22004', column = v_field,
      message = {{schema}}.producer_message(p_fn, v_field, 'must not be SQL NULL'),
      hint = 'Pass a JSON value: ''{}''::jsonb for none (JSON null is accepted).';
  end if;
  if {{schema}}.payload_suspect(p_args, 1048576) then
    v_check := {{schema}}.payload_problem(p_args, 1048576);
    if v_check.code is not null then
      raise exception using errcode = v_check.code, column = v_field,
        message = {{schema}}.producer_message(p_fn, v_field, v_check.problem),
        hint = case v_check.code when '54000' then 'Store large data elsewhere and pass a reference to it.'
                                 else 'Pass such a number as a string.' end;
    end if;
  end if;
  kind := p_kind;
  args := p_args;
  if p_opts is not null and p_opts <> '{}' and not {{schema}}.opts_ok(p_opts) then
    v_check := {{schema}}.opts_problem(p_opts);
    if v_check.field is not null then
      raise exception using errcode = '22023', column = p_at || v_check.field,
        message = {{schema}}.producer_message(p_fn, p_at || v_check.field, v_check.problem), hint = v_check.hint;
    end if;
  end if;
  queue := {{schema}}.opt_queue(p_opts);
  priority := {{schema}}.opt_priority(p_opts);
  max_attempts := {{schema}}.opt_max_attempts(p_opts);
  if p_opts is null or p_opts = '{}' then
    return;
  end if;
  if p_opts ?| array['runAt', 'delayMs'] then
    v_run_ms := {{schema}}.job_row_run_ms(p_opts, p_now_ms, p_fn, p_at);
    run_at := to_timestamp(v_run_ms / 1000.0);
  end if;
  if p_opts ? 'unique' then
    v_unique := {{schema}}.job_row_unique(p_opts -> 'unique', p_kind, queue, p_args, coalesce(v_run_ms, p_now_ms),
                                          p_fn, p_at);
    v_key := v_unique.key;
    v_states := v_unique.states;
  end if;
  if p_opts ?| array['metadata', 'tags', 'limitKey'] then
    meta := {{schema}}.job_row_meta(p_opts, v_key, v_states, p_fn, p_at);
  elsif v_key is not null then
    meta := jsonb_build_object('unique', jsonb_build_object('key', v_key, 'states', to_jsonb(v_states)));
  end if;
end
$$;

-- runAt or delayMs as epoch milliseconds; null when the job is runnable now (its time is not after p_now_ms).
create function {{schema}}.job_row_run_ms(p_opts jsonb, p_now_ms bigint, p_fn text, p_at text) returns bigint
  language plpgsql stable
  as $$
declare
  v_ms bigint;
  v_delay bigint;
  v_field text := p_at || 'opts.runAt';
begin
  if p_opts ? 'runAt' then
    v_ms := {{schema}}.iso_epoch_ms(p_opts -> 'runAt');
    if v_ms is null then
      raise exception using errcode = '22023', column = v_field,
        message = {{schema}}.producer_message(p_fn, v_field, 'must be an ISO 8601 timestamp with a time zone, got '
                                                             || {{schema}}.producer_describe(p_opts -> 'runAt')),
        hint = 'Write it as to_jsonb(a timestamptz), or as "2026-05-01T09:00:00Z" or "2026-05-01T11:00:00+02:00".';
    end if;
  end if;
  if p_opts ? 'delayMs' then
    v_field := p_at || 'opts.delayMs';
    if v_ms is not null then
      raise exception using errcode = '22023', column = v_field,
        message = {{schema}}.producer_message(p_fn, v_field, 'cannot be given with runAt'),
        hint = 'Give either runAt (a time) or delayMs (milliseconds from now), not both.';
    end if;
    v_delay := {{schema}}.js_int(p_opts -> 'delayMs', 0, 315360000000);
    if v_delay is null then
      raise exception using errcode = '22023', column = v_field,
        message = {{schema}}.producer_message(p_fn, v_field, 'must be an integer from 0 to 315360000000, got '
                                                             || {{schema}}.producer_describe(p_opts -> 'delayMs')),
        hint = 'Give milliseconds from now, at most ten years.';
    end if;
    v_ms := p_now_ms + v_delay;
  end if;
  return case when v_ms > p_now_ms then v_ms end;
end
$$;

-- The unique option (true, false or { key, states, periodMs }) as resolveUnique() reads it, and the key as
-- uniqueKey() derives it: the SHA-256, in hex, of kind NUL scope [NUL period NUL <periodMs> NUL <bucket>], the
-- scope being key NUL <key> or args NUL <queue> NUL <canonical JSON of the args>. Nulls when not unique.
create function {{schema}}.job_row_unique(p_unique jsonb, p_kind text, p_queue text, p_args jsonb,
    p_run_ms bigint, p_fn text, p_at text, out key text, out states text[])
  language plpgsql stable
  as $$
declare
  v_base constant text[] := array['scheduled', 'available', 'running', 'retryable', 'waiting_external'];
  v_check record;
  v_period bigint;
  v_nul constant bytea := '\x00';
  v_scope bytea;
begin
  if p_unique is null or p_unique = 'false' then
    return;
  end if;
  states := v_base;
  if p_unique <> 'true' and not {{schema}}.unique_ok(p_unique) then
    v_check := {{schema}}.unique_problem(p_unique, v_base);
    if v_check.field is not null then
      raise exception using errcode = '22023', column = p_at || v_check.field,
        message = {{schema}}.producer_message(p_fn, p_at || v_check.field, v_check.problem),
        hint = v_check.hint || ' See docs/unique-jobs.md.';
    end if;
  end if;
  if p_unique ? 'states' then
    -- A Set of the base states with the given ones added: in order of first appearance.
    states := v_base || array(select t.s
                                from jsonb_array_elements_text(p_unique -> 'states') with ordinality t(s, ord)
                               where t.s <> all (v_base) group by t.s order by min(t.ord));
  end if;
  v_scope := case when p_unique ? 'key'
                  then convert_to('key', 'UTF8') || v_nul || convert_to(p_unique ->> 'key', 'UTF8')
                  else convert_to('args', 'UTF8') || v_nul || convert_to(p_queue, 'UTF8') || v_nul
                       || convert_to({{schema}}.canonical_json(p_args), 'UTF8') end;
  v_period := {{schema}}.js_int(p_unique -> 'periodMs', 1000, 31622400000);
  if v_period is not null then
    v_scope := v_scope || v_nul || convert_to('period', 'UTF8') || v_nul || convert_to(v_period::text, 'UTF8')
               || v_nul || convert_to(floor(p_run_ms::numeric / v_period)::text, 'UTF8');
  end if;
  key := encode(sha256(convert_to(p_kind, 'UTF8') || v_nul || v_scope), 'hex');
end
$$;

-- A cheap check (see the top of this file) of a unique option that is an object: known names, a key of 1 to
-- 1000 bytes, states among the job states, a whole periodMs in range.
create function {{schema}}.unique_ok(p_unique jsonb) returns boolean
  language sql immutable
  as $$
    select jsonb_path_exists(p_unique, '$ ? (@.type() == "object"
             && !exists(@.keyvalue() ? (@.key != "key" && @.key != "states" && @.key != "periodMs"))
             && (!exists(@.key) || (@.key.type() == "string" && @.key != ""))
             && (!exists(@.states) || (@.states.type() == "array"
                 && !exists(@.states[*] ? (@.type() != "string"
                                           || (@ != "scheduled" && @ != "available" && @ != "running"
                                               && @ != "retryable" && @ != "waiting_external" && @ != "completed"
                                               && @ != "failed" && @ != "cancelled" && @ != "dlq")))))
             && (!exists(@.periodMs) || (@.periodMs.type() == "number" && @.periodMs == @.periodMs.floor()
                                         && @.periodMs >= 1000 && @.periodMs <= 31622400000)))', '{}', true)
           and coalesce(octet_length(p_unique ->> 'key'), 0) <= 1000
  $$;

-- What is wrong with a unique option that is an object, as (field, problem, hint); nulls when nothing is.
create function {{schema}}.unique_problem(p_unique jsonb, p_base text[], out field text, out problem text,
    out hint text)
  language plpgsql stable
  as $$
declare
  v_allowed constant text[] := p_base || array['completed', 'failed', 'cancelled', 'dlq'];
  v_bad jsonb;
begin
  if jsonb_typeof(p_unique) <> 'object' then
    field := 'opts.unique';
    problem := 'must be true, false or an object {key, states, periodMs}, got '
               || {{schema}}.producer_describe(p_unique);
    hint := 'true derives the key from the queue and the args; an object says more.';
  elsif p_unique - array['key', 'states', 'periodMs'] <> '{}' then
    field := 'opts.unique.' || (select min(k) from jsonb_object_keys(p_unique - array['key', 'states', 'periodMs']) k);
    problem := 'is not a known option (known: key, states, periodMs)';
    hint := 'Check the spelling.';
  elsif p_unique ? 'key' and (jsonb_typeof(p_unique -> 'key') <> 'string' or p_unique -> 'key' = '""'
                               or {{schema}}.js_length(p_unique ->> 'key') > 1000) then
    field := 'opts.unique.key';
    problem := 'must be a string of 1 to 1000 characters, got ' || {{schema}}.producer_describe(p_unique -> 'key');
    hint := 'Leave key out to derive it from the queue and the args.';
  elsif p_unique ? 'states' and jsonb_typeof(p_unique -> 'states') <> 'array' then
    field := 'opts.unique.states';
    problem := 'must be an array of job states';
    hint := 'List the ended states that should keep blocking: completed, failed, cancelled, dlq.';
  else
    if p_unique ? 'states' then
      select s into v_bad from jsonb_array_elements(p_unique -> 'states') s
       where jsonb_typeof(s) <> 'string' or (s #>> '{}') <> all (v_allowed) limit 1;
    end if;
    if v_bad is not null then
      field := 'opts.unique.states';
      problem := format('has %s; allowed: %s', {{schema}}.producer_describe(v_bad), array_to_string(v_allowed, ', '));
      hint := 'List the ended states that should keep blocking: completed, failed, cancelled, dlq.';
    elsif p_unique ? 'periodMs' and {{schema}}.js_int(p_unique -> 'periodMs', 1000, 31622400000) is null then
      field := 'opts.unique.periodMs';
      problem := 'must be an integer from 1000 to 31622400000, got '
                 || {{schema}}.producer_describe(p_unique -> 'periodMs');
      hint := 'Give the length of a bucket of run time in milliseconds (3600000: one job per hour).';
    end if;
  end if;
end
$$;

-- The job's meta as encodeMeta() writes it: metadata, tags and unique, each only when given; null when none.
create function {{schema}}.job_row_meta(p_opts jsonb, p_key text, p_states text[], p_fn text, p_at text)
  returns jsonb
  language plpgsql stable
  as $$
declare
  v_meta jsonb := '{}';
  v_tags jsonb := p_opts -> 'tags';
  v_field text := p_at || 'opts.metadata';
  v_problem text;
  v_check record;
begin
  if p_opts ? 'metadata' then
    if jsonb_typeof(p_opts -> 'metadata') <> 'object' then
      raise exception using errcode = '22023', column = v_field,
        message = {{schema}}.producer_message(p_fn, v_field, 'must be a JSON object, got '
                                                             || {{schema}}.producer_describe(p_opts -> 'metadata')),
        hint = 'Pass an object of your own fields, e.g. {"requestId": "r-1"}.';
    end if;
    v_meta := jsonb_build_object('metadata', p_opts -> 'metadata');
  end if;
  if v_tags is not null then
    v_problem := {{schema}}.tags_problem(v_tags);
    if v_problem is not null then
      raise exception using errcode = '22023', column = p_at || 'opts.tags',
        message = {{schema}}.producer_message(p_fn, p_at || 'opts.tags', v_problem),
        hint = 'Pass up to 20 tags, each a string of 1 to 100 characters.';
    end if;
    v_meta := v_meta || jsonb_build_object('tags', v_tags);
  end if;
  if p_key is not null then
    v_meta := v_meta || jsonb_build_object('unique', jsonb_build_object('key', p_key, 'states', to_jsonb(p_states)));
  end if;
  -- The key a limited queue counts the job under (docs/flow-control.md).
  if p_opts ? 'limitKey' then
    if jsonb_typeof(p_opts -> 'limitKey') <> 'string'
       or {{schema}}.js_length(p_opts ->> 'limitKey') not between 1 and 200 then
      raise exception using errcode = '22023', column = p_at || 'opts.limitKey',
        message = {{schema}}.producer_message(p_fn, p_at || 'opts.limitKey', 'must be a string of 1 to 200 characters, got '
                                                             || {{schema}}.producer_describe(p_opts -> 'limitKey')),
        hint = 'Give the key the queue''s limits count the job under, e.g. a tenant id.';
    end if;
    v_meta := v_meta || jsonb_build_object('limitKey', p_opts -> 'limitKey');
  end if;
  if v_meta = '{}' then
    return null;
  end if;
  if {{schema}}.payload_suspect(v_meta, 65536) then
    v_check := {{schema}}.payload_problem(v_meta, 65536);
    if v_check.code is not null then
      raise exception using errcode = v_check.code, column = v_field,
        message = {{schema}}.producer_message(p_fn, v_field, case v_check.code when '54000'
                    then '(with the tags and unique key) ' || v_check.problem else v_check.problem end),
        hint = 'Keep metadata small: store large data elsewhere and pass a reference to it.';
    end if;
  end if;
  return v_meta;
end
$$;

-- What is wrong with tags (validateTags()), or null.
create function {{schema}}.tags_problem(p_tags jsonb) returns text
  language plpgsql stable
  as $$
declare
  v_bad jsonb;
begin
  if jsonb_typeof(p_tags) <> 'array' or jsonb_array_length(p_tags) > 20 then
    return 'must be an array of at most 20 strings';
  end if;
  select t into v_bad from jsonb_array_elements(p_tags) t
   where jsonb_typeof(t) <> 'string' or t = '""' or {{schema}}.js_length(t #>> '{}') > 100 limit 1;
  if v_bad is not null then
    return 'each tag must be a string of 1 to 100 characters, got ' || {{schema}}.producer_describe(v_bad);
  end if;
  return null;
end
$$;
