-- Promotion, run by the maintenance leader: due deferred jobs (scheduled, snoozed, retry backoff) move into
-- the ready ring as fresh lane rows, at most p_limit per call; ready_at is the time they fell due, so aging and
-- pickup latency count from then. It never waits: rows another session holds are skipped, and a lane that
-- does not exist yet is created only if no producer is creating it right now (otherwise its jobs wait for
-- the next call). Returns how many moved.
create function {{schema}}.promote_due(p_limit int) returns int
  language plpgsql
  set jit = off
  as $$
declare
  g record;
  v_total int := 0;
  v_blocked text[] := '{}';
  q text;
begin
  for q in select distinct d.queue from {{schema}}.deferred_jobs d
            where d.run_at <= now()
              and not exists (select 1 from {{schema}}.lanes l where l.queue = d.queue) loop
    if not {{schema}}.ensure_lanes(q, false, false) then
      v_blocked := v_blocked || q;
    end if;
  end loop;
  for g in
    with due as (
      delete from {{schema}}.deferred_jobs d
       where d.job_id in (select x.job_id from {{schema}}.deferred_jobs x
                           where x.run_at <= now() and x.queue <> all(v_blocked)
                           order by x.run_at limit p_limit for update skip locked)
      returning d.*
    )
    select due.queue, due.priority,
           array_agg(row(due.job_id, due.kind, due.args, due.attempt, due.max_attempts, due.run_lease,
                         due.enqueued_at, due.run_at, due.meta)::{{schema}}.job_body order by due.run_at, due.job_id) as bodies
      from due group by due.queue, due.priority order by due.queue, due.priority
  loop
    perform {{schema}}.append_ready(g.queue, g.priority, g.bodies);
    v_total := v_total + cardinality(g.bodies);
  end loop;
  return v_total;
end
$$;
