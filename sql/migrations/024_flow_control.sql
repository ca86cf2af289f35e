-- Flow control (docs/flow-control.md): limits a queue's starts across the whole fleet, per key and per queue.
--   queue_settings.limits_declared  what the hosts' code declares (the last host to start writes it);
--   queue_settings.limits_override  what an operator set (CLI, dashboard), field by field over the declared;
--                                   a field set to null there removes the declared one.
--   limit_holds    the attempts of a limited queue that hold a slot of their key (and of the queue), one row per
--                  receipt: written by the claim that started them, deleted by a later claim once none of them
--                  holds a slot any more (its receipt member closed; for a strict FIFO key, its job ended).
--   limit_starts   the log of a rate limit's starts: n starts at `at`, per key (scope 'key') and for the queue
--                  (scope 'queue', key ''), one row per claim.
--   deferred_jobs  'available' rows with a gate_key: jobs a claim found over their limit, waiting at the gate in
--                  job id order per key, never due by time (run_at infinity). They are available jobs: the
--                  operator reads count and list them as such.
--   lanes shard -1 the queue's gate lane: jobs let through the gate are appended there and claimed by the same
--                  claim, so a job's start is the moment its limit allowed it.
-- An unlimited queue's claim reads one more column of queue_settings and nothing else here.
-- rolling: safe: new tables and columns, wider checks; hosts of the previous release claim through claim(), which
-- for a queue without limits answers as before (limits are set only by this release's hosts and operators, and
-- docs/deployment.md asks for every host of a limited queue to run this release first)
alter table {{schema}}.queue_settings add column limits_declared jsonb, add column limits_override jsonb;

alter table {{schema}}.lanes drop constraint lanes_shard_check;
alter table {{schema}}.lanes add constraint lanes_shard_check check (shard between -1 and 63);

alter table {{schema}}.deferred_jobs add column gate_key text;
alter table {{schema}}.deferred_jobs drop constraint deferred_jobs_state_check;
alter table {{schema}}.deferred_jobs add constraint deferred_jobs_state_check
  check (state in ('scheduled', 'retryable', 'blocked', 'available'));
-- The gate, per queue and key, oldest first (and the keys waiting, by a skip scan of the same index).
create index deferred_jobs_gate on {{schema}}.deferred_jobs (queue, gate_key, job_id) where state = 'available';

-- One row per receipt of a limited queue: the members it started (member numbers, job ids, the leases they ran
-- at, their keys), written by the claim that started them. A row per claim, not per job: what a claim starts is
-- one insert, and what it gives back one delete.
create table {{schema}}.limit_holds (
  batch_id   bigint primary key,
  queue      text not null,
  slot       smallint not null,
  idxs       int[] not null,
  job_ids    bigint[] not null,
  run_leases bigint[] not null,
  keys       text[] not null,
  held_at    timestamptz not null default now()
);
create index limit_holds_queue on {{schema}}.limit_holds (queue);

-- Appended to, never updated: a claim adds a row per key it started (and one for the queue), and a rate reads
-- only its window's rows through the index, so a snapshot held open (which keeps every dead row) costs it
-- nothing. The leader deletes rows older than any period.
create table {{schema}}.limit_starts (
  queue text not null,
  scope text not null check (scope in ('key', 'queue')),
  key   text not null,
  at    timestamptz not null,
  n     int not null
);
create index limit_starts_window on {{schema}}.limit_starts (queue, scope, key, at);
