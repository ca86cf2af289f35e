-- Bulk lanes. A bulk load (COPY) and the application's own producers used to share a lane per priority, so a
-- job enqueued while a 100,000-row load was streaming took a position behind the whole load and waited for it
-- to drain. Each (queue, priority, enqueue shard) now has a second lane, its bulk lane, which COPY appends to;
-- claims share between a priority's live lanes and its bulk lanes (claim() in sql/functions/claim.sql), so
-- live jobs are claimed at once and a load still drains at full speed. FIFO holds per lane. A queue's bulk lanes
-- are created the first time a bulk load reaches it (ensure_lanes()).
alter table {{schema}}.lanes add column bulk boolean not null default false;
alter table {{schema}}.lanes drop constraint lanes_queue_priority_shard_key;
alter table {{schema}}.lanes add constraint lanes_queue_priority_shard_bulk_key unique (queue, priority, shard, bulk);
