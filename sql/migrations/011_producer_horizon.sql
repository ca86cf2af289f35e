-- Gap horizons from the lock table. A producer used to raise the lane's xid mark (a sequence) to its own
-- transaction id under an exclusive lock, so a claimer reading the mark after the rows held a bound above
-- every owner of a gap it saw. That lock made the producers of one lane queue behind each other for a few
-- microseconds each, which, with 32 producers on 2 cores, cost a third of their throughput in sleeps and
-- wake-ups. A claimer now reads the lane's producers in flight from pg_locks (they hold the 'producing'
-- lock from before they take positions until they end) and takes its horizon from those
-- (lane_gap_horizon()); producers of single positions share the reserve lock. The marks go. Gaps already
-- recorded keep their horizons: a mark-derived horizon bounds its owners just the same.
do $marks$
declare
  v_seq regclass;
begin
  for v_seq in select l.xid_mark_seq from {{schema}}.lanes l loop
    execute format('drop sequence if exists %s', v_seq);
  end loop;
end
$marks$;
alter table {{schema}}.lanes drop column xid_mark_seq;
