-- Enqueue shards. A lane (queue, priority) has one claim cursor, so one claimer at a time: hosts sharing a busy
-- queue took turns on it, and four hosts of 250 drained at half the rate of one of 1,000. A queue may now be
-- split into S lanes per priority (shards 0..S-1, default S = 1). Producers spread their reservations over the
-- shards; claimers take lanes under try-locks and skip a lane another claimer holds, so S hosts claim side by
-- side. FIFO then holds per (queue, priority, shard), not per (queue, priority). Shard 0 is the lane a queue
-- always had, so existing lanes keep their rows and cursors.
alter table {{schema}}.lanes add column shard smallint not null default 0 check (shard between 0 and 63);
alter table {{schema}}.lanes drop constraint lanes_queue_priority_key;
alter table {{schema}}.lanes add constraint lanes_queue_priority_shard_key unique (queue, priority, shard);

alter table {{schema}}.queue_settings
  add column enqueue_shards smallint not null default 1 check (enqueue_shards between 1 and 64);

-- Which shard a producer's reservation goes to: round robin over the queue's shards (non-transactional, so no
-- producer waits for another to read it).
create sequence {{schema}}.shard_rotor_seq as bigint minvalue 0 start 0;
