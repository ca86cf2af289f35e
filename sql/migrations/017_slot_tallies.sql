-- Slot tallies. The operator reads (per-queue counts, queue health, the running list, the ring's state) summed
-- every receipt and closure the ring holds, and probed the rows of each receipt that read an older slot: a ring
-- a pinned snapshot keeps from being truncated holds tens of thousands of settled receipts, and the Queues page
-- took a second. Once a sealed slot's receipts are all settled nothing in it changes until prune truncates it,
-- so the maintenance leader sums it once (tally_slots() in sql/functions/tallies.sql) and the reads take the
-- sum instead of the slot: they aggregate only the slots not tallied (the current one and those still
-- settling). Written once per slot per turn of the ring by the leader, deleted by prune and rotate: no row here
-- changes per job, claim or settlement.

-- A sealed slot whose receipts were all settled when it was tallied. Its tallies below are the whole of what
-- the reads need from its receipts and closures.
create table {{schema}}.tallied_slots (
  slot       smallint primary key,
  tallied_at timestamptz not null default now()
);

-- Completions of a tallied slot's receipts, per lane and per slot the receipts read their rows from
-- (ready_slot), counting only receipts whose rows were still held at tally time (the others are in compact
-- history already). When prune truncates ready_slot, those completions move to compact history and the row
-- goes. first/last_closed_at bound when they were settled (what a "last N minutes" read needs to know whether
-- the whole tally falls inside its window).
create table {{schema}}.slot_tallies (
  slot            smallint not null,
  ready_slot      smallint not null,
  lane_id         int not null,
  completed       bigint not null,
  first_closed_at timestamptz not null,
  last_closed_at  timestamptz not null,
  primary key (slot, ready_slot, lane_id)
);
create index slot_tallies_ready_slot on {{schema}}.slot_tallies (ready_slot);
