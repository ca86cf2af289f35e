-- The leader's seat. Leadership is a session advisory lock: the server releases it when the leader's session
-- ends. A leader whose process is frozen (SIGSTOP, a VM pause, a swap storm) or cut off without its socket
-- being closed keeps that session, and so the lock, until the server notices (TCP keepalive: two hours by
-- default), and meanwhile nothing is promoted, rescued, rotated or pruned fleet-wide. Each instance now says
-- which backend holds its leader session and since when, so a host standing for leadership can tell the lock
-- holder's instance, and end that session once the instance has been silent past the staleness window
-- (stand_for_leader()).
alter table {{schema}}.runtime_instances
  add column leader_pid   int,
  add column leader_since timestamptz;
