-- Queue pause and resume, fleet-wide. A paused queue's claims return nothing (claim() checks first), so hosts
-- stop taking its jobs with their next claim; running jobs finish; enqueues are still accepted. Resume
-- notifies the queue's channel so hosts claim at once. Returns whether the state changed.
create function {{schema}}.set_queue_paused(p_queue text, p_paused boolean) returns boolean
  language plpgsql
  as $$
declare
  v_changed boolean;
begin
  if p_paused then
    insert into {{schema}}.queue_settings (queue, paused_at) values (p_queue, now())
    on conflict (queue) do update set paused_at = now(), updated_at = now()
     where queue_settings.paused_at is null
    returning true into v_changed;
  else
    update {{schema}}.queue_settings q set paused_at = null, updated_at = now()
     where q.queue = p_queue and q.paused_at is not null
    returning true into v_changed;
    perform pg_notify('awa:{{schema}}', p_queue);
  end if;
  return coalesce(v_changed, false);
end
$$;
