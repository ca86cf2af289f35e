-- What every statement that ends jobs does last, in its own transaction: tell those who wait on them. Two wait:
-- producers in AwaClient.result() (notify_results(), core/results.sql) and the dependents of flows
-- (resolve_dependencies(), flows.sql). settle_attempts() and place_settled() call these, never the two one by one.

-- The jobs this transaction ended, with each one's end as a job state says it (completed, failed, cancelled, dlq).
create function {{schema}}.jobs_ended(p_job_ids bigint[], p_states text[]) returns void
  language plpgsql
  as $$
begin
  if coalesce(cardinality(p_job_ids), 0) = 0 then
    return;
  end if;
  perform {{schema}}.notify_results(p_job_ids);
  perform {{schema}}.resolve_dependencies(p_job_ids, p_states);
end
$$;

-- The same for completions settled as groups of receipt members (settle_attempts()'s p_g* arguments), which carry
-- no job ids. Nearly always nobody waits on them: then this is a probe of the (empty) waiter table, under the
-- waiters' lock (results_awaited()), and one of the open-edge index. Otherwise the members' jobs are read once for
-- both, keeping those someone waits on whose closure now says completed (a member the fence refused is not
-- completed by this flush).
create function {{schema}}.group_completed(p_gslots smallint[], p_gbatches bigint[], p_gidxs int4multirange[])
  returns void
  language plpgsql
  as $$
declare
  v_ids bigint[];
begin
  if coalesce(cardinality(p_gbatches), 0) = 0
     or (not {{schema}}.results_awaited()
         and not exists (select 1 from {{schema}}.job_dependencies d where d.outcome is null)) then
    return;
  end if;
  select array_agg(distinct r.job_id) into v_ids
    from unnest(p_gslots, p_gbatches, p_gidxs) as g(given_slot, batch_id, idxs)
    cross join lateral (select {{schema}}.receipt_slot(g.given_slot, g.batch_id) as slot) rs
    cross join lateral {{schema}}.receipt_members(rs.slot, g.batch_id) m
    join {{schema}}.ready_entries r on r.slot = m.ready_slot and r.lane_id = m.lane_id and r.lane_seq = m.lane_seq
   where g.idxs @> m.idx
     and (exists (select 1 from {{schema}}.result_waiters w where w.job_id = r.job_id)
          or exists (select 1 from {{schema}}.job_dependencies d where d.depends_on = r.job_id and d.outcome is null))
     and exists (select 1 from {{schema}}.closure_batches c
                  where c.slot = rs.slot and c.batch_id = g.batch_id and c.idxs @> m.idx and c.outcome = 'completed');
  perform {{schema}}.jobs_ended(v_ids, array_fill('completed'::text, array[coalesce(cardinality(v_ids), 0)]));
end
$$;
