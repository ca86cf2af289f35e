-- Cron schedules, the rest of what they need beside cron_jobs (004).

-- Which host process declares which schedule: one row per (schedule, instance), written when a host starts
-- (cron_sync()). A schedule is declared while some live instance (heartbeating, not stopped) has a row here;
-- when none has, it is listed as undeclared since the last time one of them was heard from. Rows of dead
-- instances are pruned by the next sync of a live declarer of the same schedule.
create table {{schema}}.cron_declarations (
  name        text not null,
  instance_id text not null,
  declared_at timestamptz not null default now(),
  primary key (name, instance_id)
);

-- When the schedule was last resumed: occurrences that fell due while it was paused are not fired on resume
-- (evaluation starts from the latest of last_fire_at, created_at and resumed_at).
alter table {{schema}}.cron_jobs add column resumed_at timestamptz;

-- Each fire updates its schedule's row (last_fire_at, last_job_id); room on the page keeps those updates HOT.
alter table {{schema}}.cron_jobs set (fillfactor = 50);
