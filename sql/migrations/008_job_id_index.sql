-- Job lookups by id (getJob, cancel, the dashboard) read ready rows by job_id. The BRIN index of 001 answers
-- only for block ranges that were summarized, which happens when (auto)vacuum visits a partition; ring
-- partitions are truncated rather than vacuumed, so on a large backlog a lookup scanned every row (0.6 s at
-- 10M ready rows). A B-tree on job_id answers in microseconds whatever the statistics; job ids grow, so its
-- inserts land on the rightmost page (COPY enqueue pays about 10 %).
do $$
declare
  s int;
begin
  for s in 0..15 loop
    execute format('drop index if exists {{schema}}.%I', 'ready_entries_' || s || '_job_id_idx');
    execute format('create index %I on {{schema}}.%I (job_id)', 'ready_entries_' || s || '_job_id', 'ready_entries_' || s);
  end loop;
end
$$;
