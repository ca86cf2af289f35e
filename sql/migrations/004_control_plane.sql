-- Control plane: unique jobs, queue pause, cron schedules. Narrow, cold tables beside the hot ring: nothing
-- here is written per ordinary job.

-- Unique jobs: one row per unique key, naming the job that holds it and the states in which a holder blocks
-- a duplicate. Whether the key is still held is derived from the holder's state when a duplicate arrives
-- (job_state()), so no transition of the holder ever writes here; a producer takes over a released key by
-- updating its row. The leader deletes rows whose holder no longer blocks.
create table {{schema}}.unique_claims (
  key        text primary key,
  job_id     bigint not null,
  states     text[] not null,
  claimed_at timestamptz not null default now()
);

-- Queue pause: claims of a paused queue return nothing; enqueues are still accepted.
alter table {{schema}}.queue_settings add column paused_at timestamptz;

-- Cron schedules, declared in worker code and synced here when a host starts. last_fire_at is written in the
-- same transaction as the job of that fire, so a fire time is enqueued at most once.
create table {{schema}}.cron_jobs (
  name          text primary key,
  expression    text not null,
  timezone      text not null,
  kind          text not null,
  queue         text not null,
  priority      smallint not null,
  args          jsonb not null,
  max_attempts  smallint not null,
  meta          jsonb,
  missed_fire   text not null check (missed_fire in ('latest', 'skip')),
  hash          text not null,
  declared_by   text not null,
  declared_at   timestamptz not null default now(),
  created_at    timestamptz not null default now(),
  paused_at     timestamptz,
  last_fire_at  timestamptz,
  last_job_id   bigint
);
