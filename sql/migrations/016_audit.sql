-- The audit trail: one row per operator action (queue pause and resume, enqueue shards, job cancel and retry,
-- DLQ retry and purge, cron changes, callbacks delivered by a named actor, dashboard logins), with who, from
-- where, what, on what, and the outcome. Each row is written by the same statement as its action (see
-- src/storage/audit.ts), so a rolled-back action leaves no row and no row exists without its action. Rows are
-- only ever inserted; the maintenance leader deletes those older than the retention (audit_prune()).
create table {{schema}}.audit (
  id     bigint generated always as identity primary key,
  at     timestamptz not null default now(),
  actor  text not null,
  origin text not null,
  action text not null,
  target text,
  detail jsonb
);

-- Newest-first pages read the primary key backwards; these serve the action and actor filters, and prune.
create index audit_action on {{schema}}.audit (action, id);
create index audit_actor on {{schema}}.audit (actor, id);
create index audit_at on {{schema}}.audit (at);
