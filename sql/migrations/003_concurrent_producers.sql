-- Engine v2: producers that do not wait for each other, bounded storage with stragglers, compact completed
-- history.
--
-- v1 held a lane's enqueue lock until the producer's transaction ended, so lane positions became visible in
-- order and every producer of a lane waited for the previous one to commit. v2 takes positions in a critical
-- section of a few microseconds and holds nothing to commit; claim handles the gaps that producers still in
-- flight (or rolled back) leave behind. Each lane gets two more sequences:
--   floor_seq:    every position at or below it is claimed, cancelled, or provably dead (its producer ended
--                 without committing). Positions between the floor and the claimed high-water that no receipt
--                 covers are the gaps receipts recorded.
--   xid_mark_seq: the highest producer transaction id that has taken a position of this lane. A gap is dead
--                 once every transaction older than the mark recorded with it has ended.
--   notify_seq:   when a producer of this lane last sent a wake-up (epoch ms): producers within a few
--                 milliseconds of it skip theirs, because PostgreSQL serialises the commits of transactions
--                 that NOTIFY.
-- See docs/architecture.md, "Lanes, gaps and the floor", for the proof.
--
-- Upgrading from v1: stop producers and workers of the old version first (a v1 producer holding its lane lock
-- would otherwise race the new critical section).

-- Segments only served prune's proof; prune now probes each lane's rows above its cursors directly.
drop table {{schema}}.ready_segments;

-- The shard column was never used: one lane per (queue, priority).
alter table {{schema}}.lanes drop constraint lanes_queue_priority_shard_key;
alter table {{schema}}.lanes drop column shard;
alter table {{schema}}.lanes add constraint lanes_queue_priority_key unique (queue, priority);
alter table {{schema}}.lanes add column floor_seq regclass, add column xid_mark_seq regclass,
  add column notify_seq regclass;

do $lanes$
declare
  l record;
  v_floor text;
  v_mark text;
  v_notify text;
begin
  for l in select * from {{schema}}.lanes loop
    v_floor := 'lane_floor_' || md5(l.queue || ':' || l.priority);
    v_mark := 'lane_mark_' || md5(l.queue || ':' || l.priority);
    v_notify := 'lane_notify_' || md5(l.queue || ':' || l.priority);
    execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_floor);
    execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_mark);
    execute format('create sequence {{schema}}.%I as bigint minvalue 0 start 0', v_notify);
    perform setval(format('{{schema}}.%I', v_notify)::regclass, 0, true);
    -- v1 lanes have no gaps: everything below the claim cursor is claimed.
    perform setval(format('{{schema}}.%I', v_floor)::regclass,
                   coalesce(pg_sequence_last_value(l.claim_seq), 0), true);
    perform setval(format('{{schema}}.%I', v_mark)::regclass, 0, true);
    update {{schema}}.lanes
       set floor_seq = format('{{schema}}.%I', v_floor)::regclass,
           xid_mark_seq = format('{{schema}}.%I', v_mark)::regclass,
           notify_seq = format('{{schema}}.%I', v_notify)::regclass
     where lane_id = l.lane_id;
  end loop;
end
$lanes$;
alter table {{schema}}.lanes alter column floor_seq set not null, alter column xid_mark_seq set not null,
  alter column notify_seq set not null;

-- Receipts record the positions of their range they did not take (producers in flight, rolled back, or
-- rows of another slot): `gaps`. A receipt that discovered new gaps also records `gap_horizon`: one past the
-- lane's xid mark read after it saw them. Receipts with gaps are few; a partial index finds them.
alter table {{schema}}.claim_batches add column gaps int8multirange, add column gap_horizon bigint;

do $ring$
declare
  s int;
begin
  for s in 0..15 loop
    execute format('create index on {{schema}}.%I (lane_id, last_seq) where gaps is not null', 'claim_batches_' || s);
  end loop;
end
$ring$;

-- Open receipts carried forward out of a slot that prune truncates keep their batch id; this says which slot
-- holds them now. Written only by carry-forward, read by every receipt lookup that is given a slot.
create table {{schema}}.receipt_forwards (
  batch_id bigint primary key,
  slot     smallint not null
);

-- Compact success history, written when prune truncates a slot: one row per completion flush, attempt number
-- and run lease, naming the completed job ids as a multirange (ids of a batch are mostly consecutive).
-- Readable by getJob for completedRetentionMs without holding the ring back.
create table {{schema}}.completed_history (
  lane_id   int not null,
  attempt   smallint not null,
  run_lease bigint not null,
  ids       int8multirange not null,
  n         int not null,
  closed_at timestamptz not null
);
create index completed_history_ids on {{schema}}.completed_history using gist (ids);
create index completed_history_closed on {{schema}}.completed_history (closed_at);

-- A job body on its way into the ready ring (enqueue, promotion, DLQ retry): what append_ready() takes.
create type {{schema}}.job_body as (
  job_id       bigint,
  kind         text,
  args         jsonb,
  attempt      smallint,
  max_attempts smallint,
  run_lease    bigint,
  enqueued_at  timestamptz,
  ready_at     timestamptz,
  meta         jsonb
);

-- Which build of the engine's functions (sql/functions/) is installed: migrate re-applies them when the hash
-- of those files changes, and a worker refuses to start on functions of another build.
create table {{schema}}.schema_functions (
  hash       text primary key,
  applied_at timestamptz not null default now()
);
