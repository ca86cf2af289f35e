import { availableParallelism, cpus, totalmem } from 'node:os';
import { benchClient } from './database.js';

// What the numbers were measured on: they mean little without the server version, the cores the
// database and the harness share, and the settings that move queue throughput.

const SETTINGS = [
  'shared_buffers',
  'max_connections',
  'synchronous_commit',
  'fsync',
  'wal_level',
  'max_wal_size',
  'checkpoint_timeout',
  'work_mem',
  'autovacuum',
  'autovacuum_naptime',
  'autovacuum_vacuum_scale_factor',
  'autovacuum_vacuum_cost_limit',
];

export interface Environment {
  postgres: string;
  cores: number;
  cpu: string;
  memoryGb: number;
  node: string;
  settings: Record<string, string>;
}

export async function describeEnvironment(url: string): Promise<Environment> {
  const client = benchClient(url);
  await client.connect();
  try {
    const version = await client.query<{ v: string }>('select version() as v');
    const settings = await client.query<{ name: string; setting: string; unit: string | null }>(
      'select name, setting, unit from pg_settings where name = any($1)',
      [SETTINGS],
    );
    return {
      postgres: version.rows[0]!.v,
      cores: availableParallelism(),
      cpu: cpus()[0]?.model ?? 'unknown',
      memoryGb: Math.round(totalmem() / 2 ** 30),
      node: process.version,
      settings: Object.fromEntries(
        settings.rows.map((r) => [r.name, r.unit ? `${r.setting} ${r.unit}` : r.setting]),
      ),
    };
  } finally {
    await client.end();
  }
}
