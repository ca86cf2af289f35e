-- Recovery: worker liveness, rescue of abandoned attempts, operator cancel, attempt progress and the
-- dead-letter queue.
--
-- Liveness is per process, not per job: a worker host refreshes one runtime_instances row per
-- heartbeat interval, and that vouches for every receipt it holds. A receipt is abandoned when its
-- instance has not been heard from within the staleness window, or when its batch deadline passed.

create table {{schema}}.runtime_instances (
  instance_id  text primary key,
  hostname     text not null,
  pid          int not null,
  queues       text[] not null,
  started_at   timestamptz not null default now(),
  heartbeat_at timestamptz not null default now(),
  stopped_at   timestamptz
) with (fillfactor = 50);

-- Mutable state of a live attempt, materialised only when the attempt asks for it (progress today).
-- Keyed by attempt; the receipt columns let cleanup find rows whose attempt has ended.
create table {{schema}}.attempt_state (
  job_id     bigint not null,
  run_lease  bigint not null,
  claim_slot smallint not null,
  batch_id   bigint not null,
  idx        int not null,
  progress   jsonb,
  updated_at timestamptz not null default now(),
  primary key (job_id, run_lease)
) with (fillfactor = 70);

