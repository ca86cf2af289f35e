-- Flows (docs/flows.md, "Dependencies"): jobs enqueued together as a graph, each running once every job it
-- depends on has ended, as its edges' policies say.
--   flows             one row per enqueueFlow() call: its id and name.
--   flow_jobs         the flow's jobs by their name in it; run_at is when a dependent asked to run, no earlier
--                     than its release.
--   job_dependencies  one row per edge: job_id runs after depends_on. outcome stays null until depends_on ends
--                     (completed, failed: failed or dead-lettered, cancelled); on_failure says what a dependent does
--                     when that end is not a completion: fail with it, be skipped (cancelled), or run anyway.
--                     external: depends_on is a job outside the flow (by id), which may end before the edge
--                     commits, so the leader also looks for such edges (resolve_external_dependencies()).
--                     spawned: depends_on is a child job_id spawned while it ran (ctx.spawn()); it waits for
--                     them with ctx.waitForChildren().
-- A dependent waits in deferred_jobs as 'blocked', never due (run_at infinity), outside the claim path: the
-- statement that ends its last open dependency releases it (due now, or at its run_at) or ends it.
-- Nothing here is read on the claim path; the settling statements probe job_dependencies' open-edge index once
-- per flush, which is empty unless a flow is in flight.
-- rolling: safe: new tables and a wider check on deferred_jobs.state; a host of the previous release never enqueues a flow, so it never meets a 'blocked' row except through the functions re-created with this one
create table {{schema}}.flows (
  flow_id    bigint generated always as identity primary key,
  name       text,
  created_at timestamptz not null default now()
);

create table {{schema}}.flow_jobs (
  job_id  bigint primary key,
  flow_id bigint not null references {{schema}}.flows on delete cascade,
  name    text not null,
  run_at  timestamptz,
  unique (flow_id, name)
);

create table {{schema}}.job_dependencies (
  job_id     bigint not null,
  depends_on bigint not null,
  on_failure text not null check (on_failure in ('fail', 'skip', 'run')),
  outcome    text check (outcome in ('completed', 'failed', 'cancelled')),
  external   boolean not null default false,
  spawned    boolean not null default false,
  primary key (job_id, depends_on)
);
-- The edges still waiting, by the job they wait on (what an ending job probes) and by the job that waits (whether
-- a dependent has any left).
create index job_dependencies_open on {{schema}}.job_dependencies (depends_on) where outcome is null;
create index job_dependencies_waiting on {{schema}}.job_dependencies (job_id) where outcome is null;
create index job_dependencies_external on {{schema}}.job_dependencies (depends_on) where outcome is null and external;

alter table {{schema}}.deferred_jobs drop constraint deferred_jobs_state_check;
alter table {{schema}}.deferred_jobs add constraint deferred_jobs_state_check
  check (state in ('scheduled', 'retryable', 'blocked'));
