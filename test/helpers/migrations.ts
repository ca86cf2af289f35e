// The migrations in sql/ on this branch, written out rather than read from the code under test (a test that
// derived them from the files could not notice one missing or renamed): a new migration adds its version and
// name here, the one list the migrating tests share.
export const MIGRATION_NAMES: readonly string[] = [
  'engine',
  'recovery',
  'concurrent_producers',
  'control_plane',
  'callbacks',
  'operator',
  'cron',
  'job_id_index',
  'enqueue_shards',
  'drained_mark',
  'producer_horizon',
  'receipt_generation',
  'leader_seat',
  'lane_shard_count',
  'bulk_lanes',
  'audit',
  'slot_tallies',
  'settled_job',
  'cron_field',
  'job_results',
  'job_steps',
  'host_schema_version',
  'flows',
  'flow_control',
  'limit_gate_hash',
];
export const MIGRATION_VERSIONS: readonly number[] = MIGRATION_NAMES.map((_, i) => i + 1);
export const LATEST_VERSION: number = MIGRATION_VERSIONS.length;
