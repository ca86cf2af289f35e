-- Durable steps (docs/durable-steps.md): one row per step a job's handler finished (ctx.step(name, fn)) or sleep it
-- began (ctx.sleep(): its wake time), keyed by (job, step name), so a later attempt of the same job reads the
-- result back instead of running the step again. Written only by record_step() through the attempt's fence; the
-- primary key makes two racing attempts agree: the first insert wins and the other reads the winner's row.
-- result: the step's value as JSON; null when fn resolved with undefined (JSON null is 'null'::jsonb).
-- run_lease: the attempt that recorded it (for reads and audits; replay does not look at it).
-- Deleted by the leader's cleanup() once the job itself is gone from every table (its history passed retention,
-- or its DLQ entry was purged), a bounded number per pass. Nothing on the claim/settle loop reads or writes it:
-- a job whose handler never calls step() or sleep() never touches it.
-- rolling: safe: a new table only; hosts of the previous release never name it, and the functions re-created with it keep their calls unchanged (cleanup() only gains a trailing column)
create table {{schema}}.job_steps (
  job_id      bigint not null,
  name        text not null,
  result      jsonb,
  recorded_at timestamptz not null default now(),
  run_lease   bigint not null,
  primary key (job_id, name)
);
