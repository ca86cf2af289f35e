-- The drained mark. Producers woke a queue's hosts at most once per lane every 5 ms, so a job that arrived
-- within 5 ms of another waited for the host's next look (about 5 ms later) even when the host was idle:
-- that spacing was the p95 of pickup at moderate rates. A claimer that takes fewer jobs than it asked for
-- now records, in a sequence (non-transactional: a hint, never evidence), the lane's last position when it
-- began; a producer whose position comes right after that mark wakes the hosts whatever the spacing, and
-- producers behind a backlog keep to it. Existing lanes get the sequence here, new ones in ensure_lanes().
alter table {{schema}}.lanes add column drained_seq regclass;

do $lanes$
declare
  l record;
  v_name text;
begin
  for l in select * from {{schema}}.lanes loop
    v_name := 'lane_drained_' || md5(l.queue || ':' || l.priority || case when l.shard > 0 then ':' || l.shard else '' end);
    execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_name);
    perform setval(format('{{schema}}.%I', v_name)::regclass, 0, true);
    update {{schema}}.lanes set drained_seq = format('{{schema}}.%I', v_name)::regclass where lane_id = l.lane_id;
  end loop;
end
$lanes$;
alter table {{schema}}.lanes alter column drained_seq set not null;
