-- Standing for maintenance leadership (see 013_leader_seat.sql). One call per election tick of a host that
-- does not lead:
--   'leader'   it took the lock, and its instance row now names this session (leader_pid, leader_since);
--   'held'     a live instance holds it (or nobody can tell whose session it is): try again next tick;
--   'unseated' the holder's instance has been silent past p_staleness_secs: its session was terminated, which
--              releases the lock as the backend exits; the next tick takes it. A row marked stopped is judged
--              by its silence too: a stopping host marks itself stopped before it releases the lock.
--              unseated_instance names it.
--   'refused'  the same, but this role may not terminate that session (pg_signal_backend): an operator must.
-- A holder named by the caller's own instance is a session the caller lost track of (its connection dropped
-- on the client's side while the server kept the session, as a half-open connection does): the caller stands
-- because it does not lead. That session is ended once it has sat idle past p_staleness_secs (the instance's
-- heartbeat says nothing about it); not at once, which could race a session the server is already ending.
-- The instance that holds the lock is the one whose row names the holder's backend most recently: a backend
-- id can be reused after the session that an older row named has ended.
create function {{schema}}.stand_for_leader(p_instance text, p_staleness_secs int,
    out outcome text, out unseated_instance text, out backend_pid int)
  language plpgsql
  as $$
declare
  v_holder int;
  v_seat record;
begin
  if pg_try_advisory_lock({{schema}}.lock_ns('leader'), 0) then
    backend_pid := pg_backend_pid();
    update {{schema}}.runtime_instances set leader_pid = backend_pid, leader_since = now()
     where instance_id = p_instance;
    outcome := 'leader';
    return;
  end if;
  outcome := 'held';
  -- Most ticks end here: the holder wrote the newest leader row when it took the lock (no row can be newer while
  -- it holds), and that row is another instance's and heartbeats. pg_locks is read only when the seat looks
  -- vacant, stale or ours: it copies every lock on the server, thousands under load (each claim locks the ring's
  -- partitions), and holds the lock manager's partitions while it does.
  if exists (select 1
               from (select r.instance_id, r.heartbeat_at from {{schema}}.runtime_instances r
                      where r.leader_pid is not null
                      order by r.leader_since desc nulls last
                      limit 1) s
              where s.instance_id <> p_instance
                and s.heartbeat_at >= now() - make_interval(secs => p_staleness_secs)) then
    return;
  end if;
  -- pg_locks shows the two int4 keys of pg_advisory_lock(int4, int4) as classid / objid with objsubid 2.
  select l.pid into v_holder
    from pg_locks l
   where l.locktype = 'advisory' and l.granted and l.objsubid = 2
     and l.database = (select d.oid from pg_database d where d.datname = current_database())
     and l.classid = ({{schema}}.lock_ns('leader')::bigint & 4294967295)::oid and l.objid = 0;
  if v_holder is null then
    return;
  end if;
  select r.instance_id, r.heartbeat_at into v_seat
    from {{schema}}.runtime_instances r
   where r.leader_pid = v_holder
   order by r.leader_since desc nulls last
   limit 1;
  if v_seat.instance_id is null then
    return;
  end if;
  if v_seat.instance_id = p_instance then
    if not exists (select 1 from pg_stat_activity a
                    where a.pid = v_holder and a.state = 'idle'
                      and a.state_change < now() - make_interval(secs => p_staleness_secs)) then
      return;
    end if;
  elsif v_seat.heartbeat_at >= now() - make_interval(secs => p_staleness_secs) then
    return;
  end if;
  unseated_instance := v_seat.instance_id;
  begin
    if pg_terminate_backend(v_holder) then
      outcome := 'unseated';
    end if;
  exception when insufficient_privilege then
    outcome := 'refused';
  end;
end
$$;
