-- Progress of a live attempt, written only while its receipt member is open (the fence). The receipt is named
-- by the slot it was claimed in; a forward says where it lives if prune carried it.
create function {{schema}}.set_progress(p_slot smallint, p_batch bigint, p_idx int, p_job_id bigint, p_lease bigint,
    p_progress jsonb) returns boolean
  language plpgsql
  set jit = off
  as $$
declare
  v_slot smallint := {{schema}}.open_member_slot(p_slot, p_batch, p_idx, p_lease);
begin
  if v_slot is null then
    return false;
  end if;
  insert into {{schema}}.attempt_state (job_id, run_lease, claim_slot, batch_id, idx, progress)
    values (p_job_id, p_lease, v_slot, p_batch, p_idx, p_progress)
    on conflict (job_id, run_lease) do update set progress = excluded.progress, updated_at = now();
  return true;
end
$$;
