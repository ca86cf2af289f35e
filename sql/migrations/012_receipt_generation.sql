-- The receipt generation hint. A claim heals its lane's high-water from the receipts above the cached one
-- (lane_high()), and those could be in any of the ring's sixteen claim_batches partitions: reading all of them
-- was a fifth of a one-job claim's server time. Each lane now also keeps, in a sequence, a ring generation
-- that every receipt above its cached high-water was written in or after (stored under the lane's claim
-- lock, after the high-water itself). While the ring has not turned since, those receipts are all in the
-- current slot and one partition is read. Existing lanes get the sequence at 0 (no hint: the first claim
-- after this reads every partition, then stores it); new ones in ensure_lanes().
alter table {{schema}}.lanes add column receipt_gen_seq regclass;

do $lanes$
declare
  l record;
  v_name text;
begin
  for l in select * from {{schema}}.lanes loop
    v_name := 'lane_receipt_gen_' || md5(l.queue || ':' || l.priority || case when l.shard > 0 then ':' || l.shard else '' end);
    execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_name);
    perform setval(format('{{schema}}.%I', v_name)::regclass, 0, true);
    update {{schema}}.lanes set receipt_gen_seq = format('{{schema}}.%I', v_name)::regclass where lane_id = l.lane_id;
  end loop;
end
$lanes$;
alter table {{schema}}.lanes alter column receipt_gen_seq set not null;
