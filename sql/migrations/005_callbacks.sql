-- External callbacks: work that finishes outside the process (a payment provider, a human approval, another
-- service). An attempt registers a callback (an unguessable token bound to that attempt) and then either
-- parks (the job leaves the ring for waiting_jobs and its permit is freed) or waits in its handler. The
-- callback settles it through the same guards as everything else: one token, one attempt, one use.

-- Parked attempts: the job body, its token and deadline, until a callback or the timeout settles it.
create table {{schema}}.waiting_jobs (
  job_id        bigint primary key,
  run_lease     bigint not null,
  kind          text not null,
  queue         text not null,
  priority      smallint not null,
  args          jsonb not null,
  attempt       smallint not null,
  max_attempts  smallint not null,
  enqueued_at   timestamptz not null,
  meta          jsonb,
  token         uuid not null unique,
  waiting_since timestamptz not null default now(),
  timeout_at    timestamptz
);
create index waiting_jobs_timeout on {{schema}}.waiting_jobs (timeout_at) where timeout_at is not null;

-- An attempt's registered callback lives in its (already materialised-on-demand) attempt_state row: the token,
-- its deadline, and, for an attempt waiting inside its handler, the callback once it arrived.
alter table {{schema}}.attempt_state
  add column callback_token uuid,
  add column callback_timeout_at timestamptz,
  add column callback_result jsonb,
  add column callback_at timestamptz;
create unique index attempt_state_callback_token on {{schema}}.attempt_state (callback_token)
  where callback_token is not null;

-- A parked job completed by its callback keeps its body and result in the terminal history.
alter table {{schema}}.done_entries drop constraint done_entries_state_check;
alter table {{schema}}.done_entries add constraint done_entries_state_check
  check (state in ('completed', 'failed', 'cancelled'));
