-- The limits of each queue that has any (declared, overridden or in effect) and what they hold now: attempts
-- holding a slot, jobs waiting at the gate, and per key (the p_keys busiest) the same and its starts within
-- its rate's period. Only attempts still running count (held_members()), though their holds are given back by
-- the next claim only.
create function {{schema}}.queue_limits(p_queue text, p_keys int)
  returns table (queue text, declared jsonb, override jsonb, effective jsonb, running bigint, waiting bigint,
                 keys jsonb)
  language plpgsql stable
  -- The planner's estimates for the holds' function scans over every partition of the ring came to several
  -- times jit_above_cost, and compiling them took 0.3-2 s of a read that runs in a few milliseconds.
  set jit = off
  as $$
begin
  return query
    select s.queue, s.limits_declared, s.limits_override, e.limits,
           (select count(*) from {{schema}}.held_members(s.queue, e.fifo) h where h.running),
           (select count(*) from {{schema}}.deferred_jobs d where d.state = 'available' and d.queue = s.queue),
           (select coalesce(jsonb_agg(jsonb_build_object('key', k.key, 'running', k.running, 'waiting', k.waiting,
                                                         'recentStarts', k.recent)
                                      order by k.running desc, k.waiting desc, k.key), '[]')
              from (select x.key, sum(x.running)::int as running, sum(x.waiting)::int as waiting,
                           coalesce((select sum(ls.n) from {{schema}}.limit_starts ls
                                      where ls.queue = s.queue and ls.scope = 'key' and ls.key = x.key
                                        and ls.at > now() - coalesce((e.limits #>> '{perKey,rate,periodMs}')::float8, 1000)
                                                            * interval '1 millisecond'), 0)::int as recent
                      from (select a.key, 1 as running, 0 as waiting from {{schema}}.held_members(s.queue, e.fifo) a
                             where a.running
                            union all
                            select d.gate_key, 0, 1 from {{schema}}.deferred_jobs d
                             where d.state = 'available' and d.queue = s.queue) x
                     group by x.key
                     order by sum(x.running) desc, sum(x.waiting) desc, x.key
                     limit p_keys) k)
      from {{schema}}.queue_settings s
      cross join lateral (select {{schema}}.effective_limits(s.limits_declared, s.limits_override) as limits,
                                 coalesce(({{schema}}.effective_limits(s.limits_declared, s.limits_override)
                                           #>> '{perKey,fifo}')::boolean, false) as fifo) e
     where (s.limits_declared is not null or s.limits_override is not null)
       and (p_queue is null or s.queue = p_queue)
     order by s.queue;
end
$$;
