-- Canonical JSON: the text a unique key is derived from when no key is given. It must be byte for byte what
-- canonicalJson(JSON.parse(args)) writes in src/model/unique.ts, so a job enqueued from SQL and one enqueued
-- from TypeScript with the same args claim the same key. Three things differ between jsonb and JavaScript,
-- and each is done here the way JavaScript does it:
--   - object keys are sorted as Array.prototype.sort sorts strings, by UTF-16 code units (utf16_sort_key());
--   - numbers are what JSON.parse makes of them, doubles, written as JSON.stringify writes a double
--     (js_number_text());
--   - separators carry no spaces.
-- Strings need nothing: jsonb escapes them exactly as JSON.stringify does (", \, \b \f \n \r \t, other
-- control characters as lowercase \u00xx, nothing else), and neither can hold U+0000 or a lone surrogate.

-- The public entry. float8 output gives the shortest digits that read back as the same double (what
-- JavaScript writes) when extra_float_digits is above 0; the SET pins that whatever the session says.
create function {{schema}}.canonical_json(p_value jsonb) returns text
  language plpgsql immutable strict
  set extra_float_digits = 1
  as $$
begin
  return {{schema}}.canonical_json_of(p_value);
end
$$;

-- The recursion, under the caller's extra_float_digits (only canonical_json() calls it). A loop in PL/pgSQL
-- rather than string_agg() over a query, which costs several times as much for a small object. The recursive
-- call is a statement of its own: PL/pgSQL evaluates an expression the hard way (through the executor) when an
-- outer call of the same function is in the middle of evaluating it, so no other work goes in that statement.
create function {{schema}}.canonical_json_of(p_value jsonb) returns text
  language plpgsql stable strict
  as $$
declare
  e record;
  v_out text := '';
  v_sep text := '';
  v_item text;
begin
  case jsonb_typeof(p_value)
    when 'object' then
      for e in select j.key, j.value from jsonb_each(p_value) j
                order by {{schema}}.utf16_sort_key(j.key) collate "C" loop
        if jsonb_typeof(e.value) in ('object', 'array') then
          v_item := {{schema}}.canonical_json_of(e.value);
        else
          v_item := {{schema}}.canonical_json_scalar(e.value);
        end if;
        v_out := v_out || v_sep || to_jsonb(e.key)::text || ':' || v_item;
        v_sep := ',';
      end loop;
      return '{' || v_out || '}';
    when 'array' then
      for e in select j.value from jsonb_array_elements(p_value) with ordinality j(value, ord) order by j.ord loop
        if jsonb_typeof(e.value) in ('object', 'array') then
          v_item := {{schema}}.canonical_json_of(e.value);
        else
          v_item := {{schema}}.canonical_json_scalar(e.value);
        end if;
        v_out := v_out || v_sep || v_item;
        v_sep := ',';
      end loop;
      return '[' || v_out || ']';
    else
      return {{schema}}.canonical_json_scalar(p_value);
  end case;
end
$$;

-- A string, number, true, false or null: jsonb writes all but numbers as JavaScript does. An integer a double
-- holds exactly, the common number, is already in JavaScript's notation. A single expression, inlined into
-- canonical_json_of().
create function {{schema}}.canonical_json_scalar(p_value jsonb) returns text
  language sql immutable
  as $$
    select case when jsonb_typeof(p_value) <> 'number' then p_value::text
                when p_value::numeric = trunc(p_value::numeric) and abs(p_value::numeric) <= 9007199254740992
                  then trunc(p_value::numeric)::text
                else {{schema}}.js_number_text(p_value::numeric)
           end
  $$;

-- A key that sorts under collate "C" (code point order) as the string sorts in UTF-16 code unit order. The two
-- orders differ only between U+E000..U+FFFF (one code unit, 0xE000 and up) and the supplementary planes (a
-- surrogate pair, 0xD800..0xDBFF first): UTF-16 puts the planes first. Keys with neither, nearly all, are
-- their own sort key. A single expression, so the planner inlines it into the sort.
create function {{schema}}.utf16_sort_key(p_key text) returns text
  language sql immutable
  as $$
    select case when p_key ~ '[\uE000-\U0010FFFF]' then {{schema}}.utf16_remap(p_key) else p_key end
  $$;

-- Moves the supplementary planes down by 0x2000 (onto U+E000..U+10DFFF) and U+E000..U+FFFF up by 0x100000
-- (onto U+10E000..U+10FFFF): one to one, each group's order kept, and the planes now sort first.
create function {{schema}}.utf16_remap(p_key text) returns text
  language plpgsql immutable strict
  as $$
begin
  return (select string_agg(chr(case when c.cp >= 65536 then c.cp - 8192
                                     when c.cp >= 57344 then c.cp + 1048576
                                     else c.cp end), '' order by c.ord)
            from (select ascii(t.ch) as cp, t.ord
                    from regexp_split_to_table(p_key, '') with ordinality as t(ch, ord)) c);
end
$$;

-- A number as JSON.stringify(JSON.parse(text)) writes it: the nearest double, in its shortest digits, in
-- JavaScript's notation (Number.prototype.toString: positional from 1e-6 up to below 1e21, an exponent
-- otherwise, written e+21 / e-7). float8 output has the digits but its own notation (an exponent from 1e15
-- and below 1e-4, written e+15 / e-05), so they are read and written again. It needs extra_float_digits above
-- 0, which canonical_json() sets; it is immutable as float8 output is, which reads the same setting (and it
-- must be: a stable function would keep the SQL ones calling it from being inlined). A number outside a
-- double's range is an error (22003), as JSON.parse would read Infinity or 0; insert_job() refuses such args
-- before. String functions, not a regular expression with captures, which would cost more than all the rest.
create function {{schema}}.js_number_text(p_n numeric) returns text
  language plpgsql immutable strict
  as $$
declare
  v_double float8 := abs(p_n)::float8;
  v_text text := v_double::text;
  v_sign text := case when p_n < 0 then '-' else '' end;
  v_at int := strpos(v_text, 'e');
  v_exp int := 0;
  v_digits text;
  v_point int; -- the value is 0.<digits> × 10^v_point
  v_short record;
begin
  if v_at > 0 then
    v_exp := substr(v_text, v_at + 1)::int;
    v_text := left(v_text, v_at - 1);
  end if;
  v_at := strpos(v_text, '.');
  v_point := case when v_at > 0 then v_at - 1 else length(v_text) end + v_exp;
  v_digits := replace(v_text, '.', '');
  v_point := v_point - (length(v_digits) - length(ltrim(v_digits, '0')));
  v_digits := rtrim(ltrim(v_digits, '0'), '0');
  if v_digits = '' then
    return '0';
  end if;
  -- Only from 2^53 up (doubles that are all integers, 2 or more apart) can a rounding interval's edge be a
  -- shorter decimal than float8 output's digits; below, the edge needs more digits than a double ever gets.
  if v_double >= 9007199254740992 then
    v_short := {{schema}}.js_shortest(v_digits, v_point, v_double);
    v_digits := v_short.digits;
    v_point := v_short.point;
  end if;
  return v_sign || {{schema}}.js_notation(v_digits, v_point);
end
$$;

-- The shortest digits JavaScript writes for a double, from float8 output's. They are the same but where
-- fewer digits land exactly on the edge of the double's rounding interval: a decimal there reads back as the
-- double (ties go to the even mantissa), and JavaScript takes it, but PostgreSQL's output stays inside the
-- interval (48970433130402140: it writes 4.8970433130402144e+16). So one digit fewer is tried, rounded down
-- and up, for as long as one reads back as the double; of two, the closer (the even one on a tie), as
-- JavaScript chooses.
create function {{schema}}.js_shortest(p_digits text, p_point int, p_double float8, out digits text, out point int)
  language plpgsql immutable strict
  as $$
declare
  v_lo text;
  v_hi text;
  v_lo_ok boolean;
  v_hi_ok boolean;
  v_last int;
begin
  digits := p_digits;
  point := p_point;
  while length(digits) > 1 loop
    v_lo := left(digits, -1);
    v_hi := (v_lo::numeric + 1)::text;
    v_lo_ok := {{schema}}.reads_as_double((v_lo || 'e' || (point - length(v_lo)))::numeric, p_double);
    v_hi_ok := {{schema}}.reads_as_double((v_hi || 'e' || (point - length(v_lo)))::numeric, p_double);
    exit when not (v_lo_ok or v_hi_ok);
    v_last := right(digits, 1)::int;
    if v_hi_ok and (not v_lo_ok or v_last > 5 or (v_last = 5 and right(v_lo, 1)::int % 2 = 1)) then
      point := point + length(v_hi) - length(v_lo); -- 99 + 1 = 100 moves the point
      digits := rtrim(v_hi, '0');
    else
      digits := rtrim(v_lo, '0');
    end if;
  end loop;
end
$$;

-- Whether a decimal reads back as this double (not when it is beyond a double's range: the cast would raise).
create function {{schema}}.reads_as_double(p_n numeric, p_double float8) returns boolean
  language sql immutable
  as $$
    select case when p_n > 2.4703282292062328e-324 and p_n < 1.7976931348623158e308 then p_n::float8 = p_double
                else false end
  $$;

-- Digits and a point (the value 0.<digits> × 10^point) written as Number.prototype.toString writes them.
create function {{schema}}.js_notation(p_digits text, p_point int) returns text
  language sql immutable
  as $$
    select case when length(p_digits) <= p_point and p_point <= 21
                  then p_digits || repeat('0', p_point - length(p_digits))
                when 0 < p_point and p_point <= 21 then left(p_digits, p_point) || '.' || substr(p_digits, p_point + 1)
                when -6 < p_point and p_point <= 0 then '0.' || repeat('0', -p_point) || p_digits
                else left(p_digits, 1) || case when length(p_digits) > 1 then '.' || substr(p_digits, 2) else '' end
                     || 'e' || case when p_point > 0 then '+' else '-' end || abs(p_point - 1)::text
           end
  $$;
