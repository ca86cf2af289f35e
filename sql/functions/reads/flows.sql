-- A flow as getFlow() shows it (docs/flows.md): each job with where it stands now (job_state(), one snapshot per
-- job) and its dependencies with their policies and, once they ended, their outcomes. A job past its history's
-- retention has no state (null).
create function {{schema}}.flow_jobs_state(p_flow_id bigint)
  returns table (job_id bigint, name text, state text, attempt int, finished_at timestamptz, depends_on jsonb)
  language sql stable
  as $$
    select fj.job_id, fj.name, s.state, s.attempt, s.finished_at,
           coalesce((select jsonb_agg(jsonb_build_object('id', d.depends_on::text, 'name', dn.name,
                                                         'onFailure', d.on_failure, 'outcome', d.outcome)
                                      order by d.depends_on)
                       from {{schema}}.job_dependencies d
                       left join {{schema}}.flow_jobs dn on dn.job_id = d.depends_on
                      where d.job_id = fj.job_id), '[]'::jsonb)
      from {{schema}}.flow_jobs fj
      left join lateral (select x.state, x.attempt, x.finished_at from {{schema}}.job_state(fj.job_id) x) s on true
     where fj.flow_id = p_flow_id
     order by fj.job_id
  $$;

-- The jobs a job depends on, for its handler (ctx.dependencies(), and ctx.waitForChildren() for those it spawned):
-- each one's name in the flow (null for a job outside it), its outcome, and its stored result when it completed
-- with one.
create function {{schema}}.job_dependencies_of(p_job_id bigint)
  returns table (job_id bigint, name text, on_failure text, outcome text, spawned boolean, result jsonb)
  language sql stable
  as $$
    select d.depends_on, fj.name, d.on_failure, d.outcome, d.spawned,
           case when d.outcome = 'completed'
                then (select r.result from {{schema}}.job_results r where r.job_id = d.depends_on) end
      from {{schema}}.job_dependencies d
      left join {{schema}}.flow_jobs fj on fj.job_id = d.depends_on
     where d.job_id = p_job_id
     order by d.depends_on
  $$;
