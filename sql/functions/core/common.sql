-- Small rules every other function shares.

-- Advisory-lock keys are (namespace, id) pairs; namespaces are derived from the schema name so two Awa
-- schemas in one database never contend.
create function {{schema}}.lock_ns(purpose text) returns int
  language sql immutable parallel safe
  as $$ select hashtext('{{schema}}:' || purpose) $$;

-- The ring's current slot: the newest generation of the append-only rotation ledger.
create function {{schema}}.current_slot() returns smallint
  language sql stable
  as $$ select slot from {{schema}}.ring_rotations order by generation desc limit 1 $$;

-- The retry delay, the one definition: 2^attempt seconds plus up to 25 % jitter, capped at 24 h after the
-- jitter. Used by settle_attempts() for every retry that did not ask for its own delay (handler errors, rescue,
-- callback timeouts).
create function {{schema}}.backoff(p_attempt int) returns interval
  language sql volatile
  as $$ select make_interval(secs => least(power(2, least(greatest(p_attempt, 0), 30)) * (1 + 0.25 * random()), 86400)) $$;

-- Appends one error record to a job's meta.errors (the attempt history), keeping the newest 20. PL/pgSQL: a SQL
-- function with a subquery is never inlined and was planned again by every settle_attempts() call that settled a
-- failure (0.19 ms of a one-retry flush).
create function {{schema}}.with_error(p_meta jsonb, p_error jsonb) returns jsonb
  language plpgsql immutable
  as $$
begin
  if p_error is null then
    return p_meta;
  end if;
  return coalesce(p_meta, '{}'::jsonb) || jsonb_build_object('errors',
    (select coalesce(jsonb_agg(e order by o), '[]'::jsonb) from (
       select e, o from jsonb_array_elements(coalesce(p_meta -> 'errors', '[]'::jsonb) || jsonb_build_array(p_error))
         with ordinality as x(e, o) order by o desc limit 20) newest));
end
$$;

-- Where an attempt that did not succeed goes: the one rule for every settling path (settle_attempts() for handlers,
-- rescue and cancel; settle_waiting() for callbacks and their timeouts). A retry while attempts remain is a
-- retry; a retry on the last attempt, or a failure, is failed, or a DLQ entry on a queue with the DLQ on.
-- p_attempt: the attempt that ended, counted from 1. Other outcomes (completed, snooze, cancelled, wait,
-- resume) pass through unchanged. (PL/pgSQL, so its one query's plan is kept per session: see with_error().)
create function {{schema}}.failure_route(p_queue text, p_outcome text, p_attempt int, p_max_attempts int)
  returns text
  language plpgsql stable
  as $$
begin
  if p_outcome = 'retry' and p_attempt < p_max_attempts then
    return 'retry';
  elsif p_outcome in ('retry', 'failed') then
    return case when coalesce((select q.dlq_enabled from {{schema}}.queue_settings q where q.queue = p_queue), false)
                then 'dlq' else 'failed' end;
  end if;
  return p_outcome;
end
$$;
