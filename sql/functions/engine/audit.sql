-- The audit trail's reads and retention. Records are written beside each action's own SQL, in the same
-- statement (src/storage/audit.ts), not here.

-- A page of records, newest first: those below p_before_id, optionally of one action and one actor.
create function {{schema}}.audit_page(p_before_id bigint, p_action text, p_actor text, p_limit int)
  returns setof {{schema}}.audit
  language sql stable
  as $$
    select a.* from {{schema}}.audit a
     where a.id < coalesce(p_before_id, 9223372036854775807)
       and (p_action is null or a.action = p_action) and (p_actor is null or a.actor = p_actor)
     order by a.id desc limit p_limit
  $$;

-- Deletes up to p_limit records older than the retention (leader only); returns how many.
create function {{schema}}.audit_prune(p_retention_secs int, p_limit int) returns bigint
  language sql
  as $$
    with gone as (
      delete from {{schema}}.audit a where a.id in (
        select x.id from {{schema}}.audit x
         where x.at < now() - make_interval(secs => p_retention_secs) order by x.at limit p_limit)
      returning 1)
    select count(*) from gone
  $$;
