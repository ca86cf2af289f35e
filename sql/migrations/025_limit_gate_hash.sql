-- Flow control: the keys waiting at a limited queue's gate in the order of their hashes, so a claim reads a
-- bounded number of them from a random point (gate_keys(), docs/flow-control.md) instead of every waiting key.
-- Only jobs at a gate are in it (deferred_jobs 'available' rows).
-- rolling: safe: a new index; hosts of the previous release claim through claim(), whose body reads it
create index limit_gate_hash on {{schema}}.deferred_jobs (queue, hashtext(gate_key), gate_key)
  where state = 'available';
