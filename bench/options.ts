import type { BenchOption } from './args.js';

// The options of `awa bench`, kept apart from the harness so the CLI can list them without loading the
// peers (pg-boss, graphile-worker are dev dependencies).

export const benchSummary =
  'benchmarks: enqueue | drain | latency | pinned | soak | producers | mixed | micro, against pg-boss and graphile-worker; limits (awa only: flow control on four host processes)';

export const benchOptions: Record<string, BenchOption> = {
  jobs: {
    type: 'number',
    description: 'jobs for enqueue/drain (default 100000); limits: jobs of each drain (default 20000)',
  },
  concurrency: {
    type: 'number',
    description: 'handler concurrency per system (default 1000); limits: shared by its four host processes',
  },
  workers: { type: 'number', description: 'alias of --concurrency' },
  duration: {
    type: 'number',
    description: 'seconds for latency/pinned/soak/producers (default 20/120/600/10)',
  },
  rate: {
    type: 'number',
    description:
      "offered jobs/s for latency/pinned/soak (default 500); mixed: the producers' jobs/s in all (default 100)",
  },
  system: { type: 'string', description: 'awa|pgboss|pgboss-batch|graphile|baseline|all (default all)' },
  runs: { type: 'number', description: 'run N times and report the median (default 1)' },
  sample: { type: 'number', description: 'seconds between samples in pinned/soak (default 5)' },
  payload: { type: 'number', description: 'extra payload bytes per job (default 0)' },
  producers: {
    type: 'number',
    description: 'concurrent producer transactions for producers (default 32) and mixed (default 8; 0: none)',
  },
  'hold-ms': {
    type: 'number',
    description: 'ms each producer transaction stays open after its enqueue (default 20)',
  },
  processes: {
    type: 'number',
    description: 'drain (awa): worker processes sharing --concurrency (default: in the harness process)',
  },
  shards: {
    type: 'number',
    description:
      'awa: enqueue shards of the bench queue (lanes per priority that hosts claim side by side; default 1)',
  },
  prefetch: {
    type: 'number',
    description:
      'awa: jobs a host may hold ahead of its permits under a backlog (queues.<q>.prefetch; default the concurrency, 0 off)',
  },
  otel: {
    type: 'string',
    description:
      'awa: none (API only, default) | sdk (OpenTelemetry SDK registered, row "awa+otel") | both (the two rows side by side)',
  },
  'otel-sample': {
    type: 'number',
    description:
      'with --otel sdk|both: fraction of root traces the SDK records (a ParentBased(TraceIdRatioBased) sampler; default 1, every span)',
  },
  'handler-us': {
    type: 'number',
    description:
      'drain (in-process workers): µs of CPU each handler call spends, for every system (default 0, a no-op)',
  },
  results: {
    type: 'boolean',
    description:
      "drain (in-process workers): every handler returns a small object ({ ok: true, n }), which awa stores as the job's result (default: handlers return nothing)",
  },
  'handler-ms': {
    type: 'number',
    description:
      'mixed: ms every short handler call waits, as a handler doing I/O would (default 0, a no-op)',
  },
  long: { type: 'number', description: 'mixed: jobs that hold their permit for the whole run (default 8)' },
  rollback: {
    type: 'number',
    description: "mixed: fraction of the producers' transactions that roll back (default 0.1)",
  },
  single: {
    type: 'boolean',
    description:
      'enqueue: one job per statement, --producers calls in flight, instead of the bulk path; with awa, also the row awa+sql (the same jobs through the SQL function insert_job)',
  },
  unique: {
    type: 'boolean',
    description:
      'enqueue: every job has a distinct dedup key (awa unique, graphile-worker jobKey, pg-boss singletonKey)',
  },
  'database-url': {
    type: 'string',
    description: 'server to create bench databases on (default $DATABASE_URL)',
  },
  'pooler-url': {
    type: 'string',
    description:
      'awa (--system awa): connect through this transaction-mode pooler (PgBouncer forwarding every database to the bench server), sessions direct; the row is awa+pgbouncer',
  },
  json: { type: 'boolean', description: 'one JSON object per system per scenario, one per line' },
  report: { type: 'string', description: 'write results.jsonl and report.html (charts) to this directory' },
};
