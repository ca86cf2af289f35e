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

-- Whether a queue exists: something names it. A lane (created by its first enqueue, by a host that serves it, by a
-- cron schedule that fires into it), a settings row (pause, shards, a host's DLQ setting), or a job off the
-- ring (off_ring_jobs: scheduled, retryable, waiting, terminal history, DLQ). Pause, resume and shards refuse a
-- queue nothing names unless asked to create it, so a typo leaves no ghost queue in every list.
create function {{schema}}.queue_known(p_queue text) returns boolean
  language sql stable
  as $$
    select exists (select 1 from {{schema}}.lanes l where l.queue = p_queue)
        or exists (select 1 from {{schema}}.queue_settings s where s.queue = p_queue)
        or exists (select 1 from {{schema}}.off_ring_queues o where o.queue = p_queue)
  $$;

-- Removes a queue that holds nothing: its settings (pause, shards, DLQ flag) and its lanes with their sequences.
-- Terminal history (failed, cancelled) stays until retention, and keeps the queue listed until then.
-- Never waits for anyone: every lock is a try-lock, and a lock someone holds means the queue is in use.
--   the 'lanes' lock of the queue: nobody creates lanes for it meanwhile (ensure_lanes());
--   each lane's 'producing' lock, exclusively: no producer is between its position and its commit (they hold
--   it shared to their transaction's end), and none takes a position until this transaction ends;
--   each lane's 'claim' lock: no claim is reading the lane.
-- Then the jobs it holds are counted exactly (no producer in flight, so a position with no row is dead, not
-- late). A producer that read a lane row before this commits and locks it after finds its sequences gone, and
-- reserve_lane() starts over on the queue's new lanes: its job is never left in a lane no claim reads.
-- Returns {"unknown": true}, {"removed": true, "history": n}, or what stops it: {"holds": {...}, "servedBy":
-- [...], "busy": bool}.
create function {{schema}}.remove_queue(p_queue text, p_live_secs int) returns jsonb
  language plpgsql
  as $$
declare
  v_lane {{schema}}.lanes;
  v_busy boolean := false;
  v_holds jsonb;
  v_served text[];
  v_prefix text;
  v_seq regclass;
begin
  if not {{schema}}.queue_known(p_queue) then
    return jsonb_build_object('unknown', true);
  end if;
  v_busy := not pg_try_advisory_xact_lock({{schema}}.lock_ns('lanes'), hashtext(p_queue));
  for v_lane in select * from {{schema}}.lanes l where l.queue = p_queue order by l.lane_id loop
    exit when v_busy;
    v_busy := not pg_try_advisory_xact_lock({{schema}}.lock_ns('producing'), v_lane.lane_id)
              or not pg_try_advisory_xact_lock({{schema}}.lock_ns('claim'), v_lane.lane_id);
  end loop;
  select jsonb_build_object(
           'available', coalesce((
             select sum((select count(*) from {{schema}}.ready_entries r
                          where r.lane_id = l.lane_id and r.lane_seq >= span.lo and r.lane_seq < span.hi
                            and not exists (select 1 from {{schema}}.ready_tombstones t
                                             where t.slot = r.slot and t.lane_id = r.lane_id
                                               and t.lane_seq = r.lane_seq)))
               from {{schema}}.lanes l
               cross join lateral {{schema}}.lane_unclaimed_spans(l) span
              where l.queue = p_queue), 0)
             -- and at a limited queue's gate (limit_gate.sql)
             + (select count(*) from {{schema}}.off_ring_jobs o where o.queue = p_queue and o.state = 'available'),
           'running', coalesce((
             select sum(o.open) from {{schema}}.open_receipts(p_queue) o), 0),
           'waiting', (select count(*) from {{schema}}.off_ring_jobs o
                        where o.queue = p_queue and o.state = 'waiting_external'),
           'scheduled', (select count(*) from {{schema}}.off_ring_jobs o
                          where o.queue = p_queue and o.state = 'scheduled'),
           'retryable', (select count(*) from {{schema}}.off_ring_jobs o
                          where o.queue = p_queue and o.state = 'retryable'),
           'blocked', (select count(*) from {{schema}}.off_ring_jobs o where o.queue = p_queue and o.state = 'blocked'),
           'dlq', (select count(*) from {{schema}}.off_ring_jobs o where o.queue = p_queue and o.state = 'dlq'))
    into v_holds;
  v_served := array(select ri.hostname || ':' || ri.pid from {{schema}}.runtime_instances ri
                     where p_queue = any(ri.queues) and ri.stopped_at is null
                       and ri.heartbeat_at > now() - make_interval(secs => p_live_secs)
                     order by ri.instance_id);
  if v_busy or cardinality(v_served) > 0
     or exists (select 1 from jsonb_each(v_holds) e where e.value::bigint > 0) then
    return jsonb_build_object('holds', v_holds, 'servedBy', to_jsonb(v_served), 'busy', v_busy);
  end if;
  for v_lane in delete from {{schema}}.lanes l where l.queue = p_queue returning * loop
    foreach v_seq in array array[v_lane.enqueue_seq, v_lane.claim_seq, v_lane.floor_seq, v_lane.notify_seq,
                                  v_lane.drained_seq, v_lane.receipt_gen_seq] loop
      execute format('drop sequence if exists %s', v_seq);
    end loop;
  end loop;
  delete from {{schema}}.queue_settings s where s.queue = p_queue;
  delete from {{schema}}.limit_holds h where h.queue = p_queue;
  delete from {{schema}}.limit_starts ls where ls.queue = p_queue;
  return jsonb_build_object('removed', true,
                            'history', (select count(*) from {{schema}}.off_ring_jobs o
                                         where o.queue = p_queue
                                           and o.state in ('failed', 'cancelled', 'completed')));
end
$$;
