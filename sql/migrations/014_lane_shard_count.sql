-- Every lane row carries its queue's enqueue shard count, so a producer finds its lane with one probe of the
-- lanes table (reserve_lane()) instead of a read of queue_settings and then one of lanes: about a fifth of the
-- reservation's cost. queue_settings stays the setting; set_enqueue_shards() writes both in one transaction,
-- after creating the lanes the new count names, so a producer that reads a count finds its lanes.
alter table {{schema}}.lanes
  add column enqueue_shards smallint not null default 1 check (enqueue_shards between 1 and 64);
update {{schema}}.lanes l
   set enqueue_shards = q.enqueue_shards
  from {{schema}}.queue_settings q
 where q.queue = l.queue and q.enqueue_shards <> 1;
