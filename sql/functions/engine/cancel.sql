-- Operator cancel of one job, wherever it is. Scheduled/retryable: removed from the backlog. Parked for a
-- callback: settled as cancelled (its callback is then rejected). Waiting in the
-- ring (no receipt covers its position): tombstoned under the lane's claim lock, so no claimer can take it
-- meanwhile (claimers hold that lock only for their own short statement). Running: its receipt member is
-- closed through the fenced path and the owner is told to abort the handler. Returns the state the job was
-- in, or null when it had already finished (or never existed). Terminal history is written by place_settled(),
-- as for every settled attempt; a job cancelled before it ran again keeps the attempts it had.
create function {{schema}}.cancel_job(p_job_id bigint, p_reason text) returns text
  language plpgsql
  set jit = off
  as $$
declare
  d {{schema}}.deferred_jobs;
  r {{schema}}.ready_entries;
  w {{schema}}.waiting_jobs;
  l {{schema}}.lanes;
  b record;
  v_err jsonb;
  v_route text;
begin
  delete from {{schema}}.deferred_jobs dj where dj.job_id = p_job_id returning * into d;
  if found then
    perform {{schema}}.place_settled(array[row(d.job_id, d.run_lease, d.kind, d.queue, d.priority, d.args, d.attempt,
      d.max_attempts, d.enqueued_at,
      {{schema}}.with_error(d.meta, jsonb_build_object('attempt', d.attempt, 'at', now(), 'error', p_reason)),
      'cancelled', null, null)::{{schema}}.settled_job]);
    return d.state;
  end if;
  delete from {{schema}}.waiting_jobs wj where wj.job_id = p_job_id returning * into w;
  if found then
    v_route := {{schema}}.settle_waiting(w, 'cancel', null, null,
      jsonb_build_object('attempt', w.attempt, 'at', now(), 'error', p_reason));
    return 'waiting_external';
  end if;
  -- A job cancelled while available and then retried has two rows at one run lease: the cancelled one is older.
  select * into r from {{schema}}.ready_entries re where re.job_id = p_job_id
   order by re.run_lease desc,
            exists (select 1 from {{schema}}.ready_tombstones t
                     where t.slot = re.slot and t.lane_id = re.lane_id and t.lane_seq = re.lane_seq)
   limit 1;
  if not found or exists (select 1 from {{schema}}.done_entries de where de.job_id = p_job_id and de.run_lease >= r.run_lease) then
    return null;
  end if;
  select * into l from {{schema}}.lanes where lane_id = r.lane_id;
  perform pg_advisory_xact_lock({{schema}}.lock_ns('claim'), l.lane_id);
  v_err := jsonb_build_object('attempt', r.attempt + 1, 'at', now(), 'error', p_reason);
  if not {{schema}}.lane_covers(l.lane_id, r.lane_seq) then
    insert into {{schema}}.ready_tombstones (slot, lane_id, lane_seq, job_id, reason)
      values (r.slot, r.lane_id, r.lane_seq, r.job_id, p_reason) on conflict do nothing;
    if not found then
      return null;
    end if;
    perform {{schema}}.place_settled(array[row(r.job_id, r.run_lease, r.kind, r.queue, r.priority, r.args, r.attempt,
      r.max_attempts, r.enqueued_at, {{schema}}.with_error(r.meta, v_err), 'cancelled', null, null)::{{schema}}.settled_job]);
    return 'available';
  end if;
  select cb.slot, cb.batch_id, m.idx, m.run_lease into b
    from {{schema}}.claim_batches cb
    cross join lateral {{schema}}.receipt_members(cb.slot, cb.batch_id) m
   where cb.lane_id = r.lane_id and cb.first_seq <= r.lane_seq and cb.last_seq >= r.lane_seq
     and m.lane_seq = r.lane_seq and m.run_lease = r.run_lease + 1;
  if not found then
    return null;
  end if;
  perform 1 from {{schema}}.settle_attempts(array[b.slot], array[b.batch_id], array[b.idx], array[p_job_id], array[b.run_lease],
                                   array['cancelled'], array[null::timestamptz], array[v_err]);
  if not found then
    return null;
  end if;
  perform pg_notify('awa:{{schema}}:cancel', p_job_id || ':' || b.run_lease);
  return 'running';
end
$$;
