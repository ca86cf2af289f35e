-- A schedule's cron expression is `cron` everywhere: the option a schedule is declared with, its listing, and
-- now this column (it was `expression`).
-- rolling: safe: the previous release reaches the column only through the engine's functions, which take its `expression` key and return an `expression` column beside `cron` (sql/functions/engine/cron.sql)
alter table {{schema}}.cron_jobs rename column expression to cron;
