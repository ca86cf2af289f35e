import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidOptionError } from '../../model/errors.js';
import type { CronDefinition } from '../../model/cron.js';
import { WorkerHost, type HandlerEntry, type QueueOptions } from '../../roles.js';
import { parseArgs, UsageError, type OptionSpec } from '../args.js';
import { connectionOptions, DB_OPTIONS, POOLER_OPTIONS } from '../database-url.js';
import type { CliContext } from '../io.js';

export const workOptions: Record<string, OptionSpec> = {
  ...DB_OPTIONS,
  ...POOLER_OPTIONS,
  handlers: {
    type: 'string',
    description:
      'module exporting `handlers` (array of defineHandler(...)) and optionally `cron` (defineCron(...))',
  },
  queue: {
    type: 'string',
    multiple: true,
    description: 'queue to serve, as name or name=concurrency (repeatable)',
  },
  'no-maintenance': { type: 'boolean', description: 'never become the maintenance leader' },
};

/** Runs a worker host until SIGINT/SIGTERM, then stops it gracefully. */
export async function workCommand(argv: string[], ctx: CliContext): Promise<void> {
  const { positionals, values } = parseArgs(argv, workOptions);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const path = values.handlers as string | undefined;
  if (!path) throw new UsageError('--handlers <module> is required');
  const moduleUrl = pathToFileURL(resolve(path)).href;
  const mod = (await import(moduleUrl)) as { handlers?: unknown; default?: unknown; cron?: unknown };
  const handlers = (mod.handlers ?? mod.default) as HandlerEntry<never>[] | undefined;
  if (!Array.isArray(handlers)) {
    throw new InvalidOptionError(
      'handlers',
      `${path} must export \`handlers\` (or a default export): an array of defineHandler(kind, fn)`,
    );
  }
  const queues: Record<string, QueueOptions> = {};
  for (const q of (values.queue as string[] | undefined) ?? ['default']) {
    const [name, concurrency] = String(q).split('=');
    queues[name!] = { concurrency: concurrency === undefined ? 50 : Number(concurrency) };
  }
  // Kinds declared `execution: 'pool'` run in worker threads that load this same module; the host
  // registers them itself, so only the inline ones are registered here.
  const pooled = handlers.some((h) => h.kind.execution === 'pool');
  const host = new WorkerHost({
    ...connectionOptions(values, ctx.env),
    schema: values.schema as string | undefined,
    queues,
    maintenance: !values['no-maintenance'],
    threadPool: pooled ? { module: moduleUrl } : undefined,
    cron: mod.cron as CronDefinition[] | undefined,
  });
  host.registerAll(handlers.filter((h) => h.kind.execution !== 'pool'));
  host.on('error', (err) => ctx.err(`[awa] ${err instanceof Error ? err.message : String(err)}`));
  host.on('warning', (warning) => ctx.err(`[awa] warning: ${warning.message}`));
  host.on('leadership', (leader) =>
    ctx.err(`[awa] ${leader ? 'became' : 'gave up being'} maintenance leader`),
  );
  await host.start();
  ctx.err(`[awa] worker ${host.config.instanceId} serving ${Object.keys(queues).join(', ')}; Ctrl-C to stop`);
  await new Promise<void>((done) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      ctx.err('[awa] stopping: finishing running jobs…');
      host.stop().then(done, done);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
