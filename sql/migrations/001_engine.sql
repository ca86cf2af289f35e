-- Awa storage engine v1.
--
-- {{schema}} is replaced by the (quoted) schema name when the migration runs; nothing else is templated.
-- Tables only: the engine's functions live in sql/functions/ and are re-applied by every migrate.
--
-- Shape, in one paragraph: every hot table is list-partitioned by `slot` into a ring of 16 slots. Producers
-- append immutable job bodies (ready_entries) into the ring's current slot, one segment row per enqueue
-- call and lane. A claim appends ONE claim_batches row (the receipt plane: a lane range and a run lease)
-- per batch; a completion flush appends ONE closure_batches row per claim batch it settles. A receipt is open
-- while no closure names it. Lane cursors are sequences (non-transactional, no dead tuples). Rotation
-- appends to a ledger; prune proves a sealed slot spent and TRUNCATEs it. Nothing on the claim/complete
-- loop updates or deletes a row.

create schema if not exists {{schema}};

create table {{schema}}.schema_version (
  version    int primary key,
  name       text not null,
  applied_at timestamptz not null default now()
);

create sequence {{schema}}.job_id_seq as bigint cache 64;
create sequence {{schema}}.claim_batch_seq as bigint;

-- Lanes: one ordered stream per (queue, priority, shard). Cold registry: a row is inserted once, never
-- updated. The cursors live in two sequences per lane:
--   enqueue_seq: last lane_seq handed to a producer;
--   claim_seq:   claimed-through position (every lane_seq <= it has been emitted to a claim batch).
create table {{schema}}.lanes (
  lane_id     int generated always as identity primary key,
  queue       text not null,
  priority    smallint not null check (priority between 1 and 4),
  shard       smallint not null default 0,
  enqueue_seq regclass not null,
  claim_seq   regclass not null,
  created_at  timestamptz not null default now(),
  unique (queue, priority, shard)
);

-- Ring ledger: append-only; the current slot is the row with the highest generation.
create table {{schema}}.ring_rotations (
  generation bigint primary key,
  slot       smallint not null,
  rotated_at timestamptz not null default now()
);
insert into {{schema}}.ring_rotations (generation, slot) values (0, 0);

-- Immutable job bodies. attempt = attempts already made; run_lease = lease of the last attempt.
create table {{schema}}.ready_entries (
  slot         smallint not null,
  lane_id      int not null,
  lane_seq     bigint not null,
  job_id       bigint not null default nextval('{{schema}}.job_id_seq'),
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null default 0,
  max_attempts smallint not null default 25,
  run_lease    bigint not null default 0,
  enqueued_at  timestamptz not null default now(),
  ready_at     timestamptz not null default now(),
  meta         jsonb,
  primary key (lane_id, lane_seq, slot)
) partition by list (slot);

-- One row per committed enqueue range: lets prune prove a slot's ready rows are all claimed without
-- scanning the rows themselves.
create table {{schema}}.ready_segments (
  slot      smallint not null,
  lane_id   int not null,
  first_seq bigint not null,
  last_seq  bigint not null,
  created_at timestamptz not null default now()
) partition by list (slot);

-- "This lane_seq is dead" (an unclaimed job was cancelled). Slot = the ready row's slot.
create table {{schema}}.ready_tombstones (
  slot     smallint not null,
  lane_id  int not null,
  lane_seq bigint not null,
  job_id   bigint not null,
  reason   text not null,
  at       timestamptz not null default now(),
  primary key (lane_id, lane_seq, slot)
) partition by list (slot);

-- The receipt plane: one row per claim call and lane, naming a lane range rather than listing jobs, so
-- it stays a few dozen bytes however large the batch. Member i (1-based, i <= size) is the ready row at
-- lane_seq first_seq + i - 1 claimed with run lease `lease`; lane_seqs / run_leases are stored only when
-- that rule does not hold (tombstones or rolled-back gaps inside the range; mixed leases after retries).
-- first_seq..last_seq is the lane range this batch consumed, which is also the evidence that heals a
-- claim cursor that lags behind.
create table {{schema}}.claim_batches (
  slot        smallint not null,
  batch_id    bigint not null,
  lane_id     int not null,
  ready_slot  smallint not null,
  first_seq   bigint not null,
  last_seq    bigint not null,
  size        int not null,
  lease       bigint,
  lane_seqs   bigint[],
  run_leases  bigint[],
  instance_id text not null,
  claimed_at  timestamptz not null default now(),
  deadline_at timestamptz,
  primary key (batch_id, slot)
) partition by list (slot);

-- One row per (flush, claim batch, outcome class): which members of that batch are settled, as a
-- multirange of member indexes (completions arrive in near claim order, so this is usually one range).
-- Lives in the claim batch's slot, so a slot's receipts and their closures are truncated together.
-- outcome='completed' rows are also the compact success history.
create table {{schema}}.closure_batches (
  slot      smallint not null,
  batch_id  bigint not null,
  idxs      int4multirange not null,
  n         int not null,
  outcome   text not null,
  closed_at timestamptz not null default now()
) partition by list (slot);

do $ring$
declare
  s int;
  t text;
begin
  for s in 0..15 loop
    foreach t in array array['ready_entries', 'ready_segments', 'ready_tombstones', 'claim_batches', 'closure_batches'] loop
      execute format('create table {{schema}}.%I partition of {{schema}}.%I for values in (%s)', t || '_' || s, t, s);
    end loop;
    execute format('create index on {{schema}}.%I (lane_id, last_seq)', 'claim_batches_' || s);
    execute format('create index on {{schema}}.%I (ready_slot)', 'claim_batches_' || s);
    execute format('create index on {{schema}}.%I (batch_id)', 'closure_batches_' || s);
    execute format('create index on {{schema}}.%I (lane_id, last_seq)', 'ready_segments_' || s);
    -- job ids grow with time inside a slot, so a BRIN index makes id lookups cheap at almost no enqueue cost.
    execute format('create index on {{schema}}.%I using brin (job_id)', 'ready_entries_' || s);
  end loop;
end
$ring$;

-- Scheduled (future run_at, snoozed) and retryable (backoff) jobs: outside the claim path until the
-- maintenance leader promotes them into the ready ring.
create table {{schema}}.deferred_jobs (
  job_id       bigint primary key,
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null,
  max_attempts smallint not null,
  run_lease    bigint not null,
  run_at       timestamptz not null,
  state        text not null check (state in ('scheduled', 'retryable')),
  enqueued_at  timestamptz not null,
  meta         jsonb
);
create index deferred_jobs_due on {{schema}}.deferred_jobs (run_at);

-- Wide terminal rows for every non-success outcome (failed, cancelled). Not in the ring: failure history
-- must outlive ring prune, so the leader deletes rows past their retention instead.
create table {{schema}}.done_entries (
  job_id       bigint not null,
  run_lease    bigint not null,
  state        text not null check (state in ('failed', 'cancelled')),
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null,
  max_attempts smallint not null,
  enqueued_at  timestamptz not null,
  finished_at  timestamptz not null default now(),
  meta         jsonb,
  primary key (job_id, run_lease)
);
create index done_entries_finished on {{schema}}.done_entries (finished_at);

-- Per-queue settings the storage layer needs to route outcomes (cold: written when hosts start).
create table {{schema}}.queue_settings (
  queue       text primary key,
  dlq_enabled boolean not null default false,
  updated_at  timestamptz not null default now()
);

-- Operator hold: terminal failures of DLQ-enabled queues, with their last error and attempt history
-- (meta.errors). Retry re-enqueues with a fresh attempt counter; the leader applies retention.
create table {{schema}}.dlq_entries (
  job_id       bigint primary key,
  run_lease    bigint not null,
  kind         text not null,
  queue        text not null,
  priority     smallint not null,
  args         jsonb not null,
  attempt      smallint not null,
  max_attempts smallint not null,
  enqueued_at  timestamptz not null,
  dlq_at       timestamptz not null default now(),
  reason       text,
  meta         jsonb
);
create index dlq_entries_queue on {{schema}}.dlq_entries (queue, dlq_at);

