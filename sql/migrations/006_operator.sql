-- Operator surfaces: what each live host says about itself and about the queues and kinds it serves, and the
-- indexes admin reads page through. All cold: written at host start and on a slow snapshot tick.

-- Each host's snapshot, refreshed by its heartbeat (the same row write it already did).
alter table {{schema}}.runtime_instances
  add column version     text,
  add column concurrency jsonb,
  add column in_flight   int not null default 0,
  add column is_leader   boolean not null default false;

-- Descriptors of queues and kinds as each host declares them in code (label, description, owner, docs URL,
-- expected concurrency…), with a hash: admin reads derive "stale" (no live host refreshed it lately) and
-- "drift" (live hosts report different hashes).
create table {{schema}}.descriptor_reports (
  subject     text not null check (subject in ('queue', 'kind')),
  name        text not null,
  instance_id text not null,
  hash        text not null,
  descriptor  jsonb not null,
  reported_at timestamptz not null default now(),
  primary key (subject, name, instance_id)
) with (fillfactor = 70);

-- Paged, indexed admin reads over history and backlog.
create index done_entries_queue_state on {{schema}}.done_entries (queue, state, job_id);
create index deferred_jobs_queue_state on {{schema}}.deferred_jobs (queue, state, job_id);
create index waiting_jobs_queue on {{schema}}.waiting_jobs (queue, job_id);
create index dlq_entries_job on {{schema}}.dlq_entries (queue, job_id);
