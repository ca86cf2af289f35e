-- Unique jobs. A job enqueued with a unique key (meta.unique = { key, states }) must take the key's claim in
-- the same transaction: unique_claims' primary key makes concurrent producers of one key queue on each other
-- (only them), and exactly one wins. A claim is held while its holder's current state is one of the states
-- it was taken with; the holder's transitions never write here: the next producer of the key reads the
-- holder's state (job_state()) and either reports a duplicate or takes the key over.

-- True when job p_job_id is in one of p_states now (false once its history is gone). A holder found nowhere is
-- looked for again in a statement of its own, as enqueue_flow() does: job_state() is stable, so its reads run on
-- the snapshot of the statement that calls it, taken before they lock the ring partitions; one that waited there
-- for a prune truncating the holder's slot found the slot empty (TRUNCATE is not MVCC-safe) and not the rows the
-- prune carried forward or the history it kept, both newer than that snapshot. The holder read as gone, and a
-- duplicate took its key (prune-snapshot.test.ts). The first read leaves this transaction holding every
-- ready_entries partition, which a prune must lock too: the second read's snapshot is newer than any prune that
-- emptied a slot for the first, and no other prune can run before this transaction ends. Volatile, so that each
-- read takes a snapshot of its own.
create function {{schema}}.holder_blocks(p_job_id bigint, p_states text[]) returns boolean
  language plpgsql
  as $$
declare
  v_state text;
begin
  for i in 1..2 loop
    select s.state into v_state from {{schema}}.job_state(p_job_id) s;
    if found then
      return v_state = any(p_states);
    end if;
  end loop;
  return false;
end
$$;

-- Takes the claim on p_key for job p_job_id, or returns the job that holds it. p_taken lists jobs of the same
-- call (their rows do not exist yet, so one that took a key counts as holding it); it is read only when the
-- key is held.
create function {{schema}}.unique_acquire(p_key text, p_job_id bigint, p_states text[], p_taken bigint[])
  returns bigint
  language plpgsql
  as $$
declare
  h {{schema}}.unique_claims;
begin
  loop
    insert into {{schema}}.unique_claims (key, job_id, states) values (p_key, p_job_id, p_states)
      on conflict (key) do nothing;
    if found then
      return null;
    end if;
    -- Locks the row: a producer taking the key over right now is waited for, then its holder is read.
    select * into h from {{schema}}.unique_claims u where u.key = p_key for update;
    continue when not found; -- cleaned up meanwhile: try the insert again
    if h.job_id = p_job_id then
      return null; -- its own claim (a DLQ retry of the holder)
    end if;
    if h.job_id = any(p_taken) or {{schema}}.holder_blocks(h.job_id, h.states) then
      return h.job_id;
    end if;
    update {{schema}}.unique_claims u set job_id = p_job_id, states = p_states, claimed_at = now()
     where u.key = p_key;
    return null;
  end loop;
end
$$;

-- Claims the leader may delete: their holder no longer blocks (finished, or its history is gone).
create function {{schema}}.unique_cleanup(p_limit int) returns bigint
  language plpgsql
  as $$
declare
  v_n bigint;
begin
  with gone as (
    delete from {{schema}}.unique_claims u
     where u.key in (select x.key from {{schema}}.unique_claims x
                      where not {{schema}}.holder_blocks(x.job_id, x.states)
                      order by x.claimed_at limit p_limit
                      for update skip locked)
    returning 1)
  select count(*) into v_n from gone;
  return v_n;
end
$$;
